"""The `parity` command and what it writes: sessions, plans, profiles, records, summaries,
findings, bundles, expectations and the HTML report.
"""
