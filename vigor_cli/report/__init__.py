"""What the commands print and plot: tables, curves and views of a run's files."""
