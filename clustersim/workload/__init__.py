"""Traffic: requests, their lengths and arrival times, and the SimPy processes that send them."""
