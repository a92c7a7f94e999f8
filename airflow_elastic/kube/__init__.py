"""Well-known Kubernetes names (a leaf: standard library only): the labels, annotations and container names the
provider and its pods agree on, where spot capacity lives on each platform, and the schemas manifests are checked
against."""
