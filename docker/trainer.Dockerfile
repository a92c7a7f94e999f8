# Example training image. Training code only needs `airflow_elastic.runtime` and `airflow_elastic.contract`,
# which use the standard library alone, so the package is installed without its (Airflow) dependencies.
#   docker build -f docker/trainer.Dockerfile -t trainer:dev .
FROM python:3.11-slim
COPY pyproject.toml README.md /src/
COPY airflow_elastic /src/airflow_elastic
RUN pip install --no-cache-dir --no-deps /src && rm -rf /src
WORKDIR /workspace
