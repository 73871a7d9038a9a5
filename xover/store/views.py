"""Views that answer common questions in plain SQL, created by the migrations.

    SELECT samples_per_s FROM run_throughput WHERE experiment_id = 'Y' AND name = 'X';
    SELECT mode, policy, samples_per_s FROM run_throughput WHERE experiment_id = 'Y';

A migration creates a view as it stood at that revision (the columns it reads must exist then), so
each version of a view is kept under its own name and a new one comes with a migration of its own.
"""

# 0001-0009: a run's throughput, without how it ran
RUN_THROUGHPUT_VIEW_0001 = """
CREATE VIEW run_throughput AS
SELECT r.id AS run_id, r.experiment_id, r.name, r.mode, r.status, r.np,
       COUNT(m.id) AS iterations,
       SUM(m.samples) / NULLIF(SUM(m.iteration_s), 0) AS samples_per_s,
       AVG(m.iteration_s) AS mean_iteration_s
FROM runs r LEFT JOIN iteration_metrics m ON m.run_id = r.id AND m.step > 0
GROUP BY r.id
"""

# 0010-0019: with the group, engine and turn policy each run had (crossover runs differ only by policy)
RUN_THROUGHPUT_VIEW_0010 = """
CREATE VIEW run_throughput AS
SELECT r.id AS run_id, r.experiment_id, r.name, r.mode, r.policy, r.engine, r.group_index, r.status, r.np,
       COUNT(m.id) AS iterations,
       SUM(m.samples) / NULLIF(SUM(m.iteration_s), 0) AS samples_per_s,
       AVG(m.iteration_s) AS mean_iteration_s
FROM runs r LEFT JOIN iteration_metrics m ON m.run_id = r.id AND m.step > 0
GROUP BY r.id
"""

# 0020: no samples/s for a run that ended without finishing (failed, timeout, interrupted, stopped, cancelled,
# lost), as analysis.compare has it in every view; a run still pending or running keeps its figure so far, and
# every run its iterations and mean iteration time. The statuses are written out: the view is as it stood at 0020.
RUN_THROUGHPUT_VIEW = """
CREATE VIEW run_throughput AS
SELECT r.id AS run_id, r.experiment_id, r.name, r.mode, r.policy, r.engine, r.group_index, r.status, r.np,
       COUNT(m.id) AS iterations,
       CASE WHEN r.status IN ('finished', 'pending', 'running')
            THEN SUM(m.samples) / NULLIF(SUM(m.iteration_s), 0) END AS samples_per_s,
       AVG(m.iteration_s) AS mean_iteration_s
FROM runs r LEFT JOIN iteration_metrics m ON m.run_id = r.id AND m.step > 0
GROUP BY r.id
"""
DROP_RUN_THROUGHPUT_VIEW = "DROP VIEW IF EXISTS run_throughput"
