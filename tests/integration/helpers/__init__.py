"""What several integration test modules share beyond conftest's fixtures: no test module imports another."""
