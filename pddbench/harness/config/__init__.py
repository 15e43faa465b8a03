"""What a run is configured from: scenarios (systems under test and their conditions)."""
