# Airflow image with the airflow-elastic provider, pinned by the repository's constraints file.
#   docker build -f docker/airflow.Dockerfile -t airflow-elastic:dev .
FROM apache/airflow:3.3.2-python3.11
COPY --chown=airflow:root pyproject.toml README.md constraints.txt /opt/airflow-elastic/
COPY --chown=airflow:root airflow_elastic /opt/airflow-elastic/airflow_elastic
RUN pip install --no-cache-dir -c /opt/airflow-elastic/constraints.txt /opt/airflow-elastic
COPY --chown=airflow:root dags /opt/airflow/dags
