"""What fleetplan owns: the versioned state value (`model`) and where it is kept (`storing`).

The state knows nothing about plans or the config. It records, per address, the object's uid, a
hash of what was applied, non-secret outputs and hashes of secret ones, plus an intent journal of
side effects that were started and may not have finished.
"""
