"""The profile step: each job measured alone and beside a partner, its profile stored for the plan.

* ``step`` - `xover profile`: the measuring runs (through run/) and what they store (store/profiles.py);
  the plan step reads them back as the planner's JobProfile (plan/from_profiles.py).
"""
