"""Encryption at rest (issue 42): key files and the key ring that seals stored values.

`keyfile` makes and reads key files (stdlib only); `cipher` is the one module that
imports the `cryptography` package (AES-256-GCM), loaded only when a key is configured.
The store never imports this package: a front end builds a `Keyring` and hands it to
`open_store`, which seals and opens values through it (flowctl.store.values).
"""
