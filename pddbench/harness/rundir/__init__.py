"""The run folder: the one contract between the run half and the judge half of the harness."""
