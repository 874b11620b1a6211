"""The bodies of the KFP components, one module per component file, imported in the pod (see each module)."""
