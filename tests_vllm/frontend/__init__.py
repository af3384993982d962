"""The frontend harness (see conftest.py): a package, so that its modules are named apart from
the engine tests' (its own conftest.py among them) and import the shared ones of tests_vllm/."""
