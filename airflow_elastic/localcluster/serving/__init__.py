"""Programs the local cluster's built-in KServe images run (see :mod:`airflow_elastic.localcluster.images`): the
PyTorch predictor (under the serving Python, importing only kserve, torch and the standard library) and the storage
initializer (standard library only). Both run as plain files, never imported by the cluster itself."""
