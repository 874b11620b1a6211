"""Code the tests share that is neither a fixture nor a test: ports, servers, workers."""
