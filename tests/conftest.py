"""Every test starts from users' own profile stores: the local cluster's shared store
(state/profiles, which its sync timer compiles) is the demo's and its users', not the
tests'. A test that wants a shared store names one (SYNERGY_PROFILES=<folder>)."""

import os

os.environ["SYNERGY_PROFILES"] = ""
