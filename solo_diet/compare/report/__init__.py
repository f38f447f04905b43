"""The report: the jobs' results in, results.csv, the plots and report.md out."""
