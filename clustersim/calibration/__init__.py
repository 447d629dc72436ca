"""Fit profiles to a user's own serving measurements (``clustersim calibrate``).

``measurements`` reads the CSV of measured settings; ``simulate`` turns a row into the scenario of its
benchmark and runs it with candidate profiles; ``parameters`` says which profile fields are fitted and
within which bounds; ``fit`` fits them by least squares and scores the fit by leave-one-out and on
held-out rows; ``report`` prints the errors; ``profilefile`` writes the fitted profiles, citing the data.
"""
