"""A local model as an embedded option: llama-cpp-python's server started by evolve itself."""
