"""Fit profiles to a user's own serving measurements (``clustersim calibrate``).

``measurements`` reads the CSV of measured settings; ``datafiles`` reads any mix of CSVs and benchmark
tools' JSON files (``vllmresult``: ``vllm bench serve --save-result``; ``guidellmreport``: GuideLLM
reports; ``profileexport``: GenAI-Perf and AIPerf exports; each through ``jsonfields``' typed reads
into a ``benchruns.BenchmarkRun``) as the same rows; ``simulate`` turns a row into the scenario of its
benchmark (replaying the requests a file lists) and runs it with candidate profiles; ``parameters``
says which profile fields are fitted and within which bounds; ``fit`` fits them by least squares and
scores the fit by leave-one-out and on held-out rows; ``report`` prints the errors and correlations;
``profilefile`` writes the fitted profiles, citing the data.
"""
