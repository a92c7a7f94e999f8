"""The HTTP side of the local cluster: routing, verbs, watch and log streams, patches, discovery and OpenAPI."""
