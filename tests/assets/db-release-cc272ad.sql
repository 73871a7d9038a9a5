-- A database written by xover at commit cc272ad (before the engine column): one train, one profile, one plan.
BEGIN TRANSACTION;
CREATE TABLE evaluations (
	id INTEGER NOT NULL, 
	run_id INTEGER NOT NULL, 
	step INTEGER NOT NULL, 
	metric VARCHAR(60) NOT NULL, 
	value DOUBLE NOT NULL, 
	PRIMARY KEY (id), 
	FOREIGN KEY(run_id) REFERENCES runs (id)
);
INSERT INTO "evaluations" VALUES(1,1,4,'test_accuracy',4.57912457912457937503e-01);
INSERT INTO "evaluations" VALUES(2,1,4,'test_loss',2.1692066192626953125e+00);
INSERT INTO "evaluations" VALUES(3,2,8,'test_accuracy',6.93602693602693554097e-01);
INSERT INTO "evaluations" VALUES(4,2,8,'test_loss',1.91871619224548339843e+00);
CREATE TABLE experiments (
	id VARCHAR(40) NOT NULL, 
	kind VARCHAR(20) NOT NULL, 
	command TEXT NOT NULL, 
	status VARCHAR(20) NOT NULL, 
	bandwidth VARCHAR(40), 
	hosts TEXT NOT NULL, 
	plan_id INTEGER, 
	hardware TEXT, 
	created_at DATETIME NOT NULL, 
	ended_at DATETIME, 
	PRIMARY KEY (id), 
	FOREIGN KEY(plan_id) REFERENCES plans (id)
);
INSERT INTO "experiments" VALUES('20261122-000602-b4e0','train','xover train recipes/mlp-digits.toml --iterations 4','finished',NULL,'localhost',NULL,NULL,'2026-11-22 00:06:02.472113','2026-11-22 00:06:08.729700');
INSERT INTO "experiments" VALUES('20261122-000609-b114','profile','xover profile recipes/mlp-digits.toml --iterations 8 --warmup 2','finished',NULL,'localhost',NULL,NULL,'2026-11-22 00:06:09.225675','2026-11-22 00:06:14.367906');
CREATE TABLE iteration_metrics (
	id INTEGER NOT NULL, 
	run_id INTEGER NOT NULL, 
	step INTEGER NOT NULL, 
	time_s DOUBLE NOT NULL, 
	wall_time DOUBLE NOT NULL, 
	iteration_s DOUBLE NOT NULL, 
	data_s DOUBLE NOT NULL, 
	compute_s DOUBLE NOT NULL, 
	communication_s DOUBLE NOT NULL, 
	wait_s DOUBLE NOT NULL, 
	samples INTEGER NOT NULL, 
	loss DOUBLE NOT NULL, 
	PRIMARY KEY (id), 
	UNIQUE (run_id, step), 
	FOREIGN KEY(run_id) REFERENCES runs (id)
);
INSERT INTO "iteration_metrics" VALUES(1,1,0,2.80823000000509637175e-02,1.79530596764334273341e+09,2.80823000000509637175e-02,2.75836000014351157005e-04,2.78013079999936962849e-02,1.80000029104121495038e-07,0.0,64,2.30359506607055664062e+00);
INSERT INTO "iteration_metrics" VALUES(2,1,1,4.2388585000026068883e-02,1.79530596765764951703e+09,1.43062849999751051655e-02,1.72614000007342838216e-04,2.06782500004010216798e-03,1.18676949999780845246e-02,0.0,64,2.27484345436096191406e+00);
INSERT INTO "iteration_metrics" VALUES(3,1,2,5.94420800000534654827e-02,1.79530596767470145228e+09,1.70534950000273965997e-02,1.71633000036308658309e-04,5.69424700006493367254e-03,1.10953790000394292292e-02,0.0,64,2.29099607467651367187e+00);
INSERT INTO "iteration_metrics" VALUES(4,1,3,6.34638669999958437983e-02,1.79530596767872381211e+09,4.0217869999423783156e-03,0.000142707000009068,1.67761199998039955971e-03,2.09666099999594734981e-03,0.0,64,2.20886707305908203125e+00);
INSERT INTO "iteration_metrics" VALUES(5,2,0,3.93162800003210577415e-03,1.7953059732181863785e+09,3.93162800003210577415e-03,3.50509999975656683091e-04,3.57373500003177468897e-03,2.06999970941978972405e-07,0.0,64,2.30359506607055664062e+00);
INSERT INTO "iteration_metrics" VALUES(6,2,1,2.94135210000376901007e-02,1.79530597324366736409e+09,2.54818930000055843265e-02,1.76735999957600142806e-04,5.48351600002661143662e-03,1.9609415999980228662e-02,0.0,64,2.27484345436096191406e+00);
INSERT INTO "iteration_metrics" VALUES(7,2,2,3.91913660000682284589e-02,1.79530597325344538689e+09,9.77784500003053835825e-03,1.81639000061295519117e-04,2.0130130000097778975e-03,7.43942599990532471565e-03,0.0,64,2.29099607467651367187e+00);
INSERT INTO "iteration_metrics" VALUES(8,2,3,4.46119900000212510349e-02,1.79530597325886487965e+09,5.42062399995302257593e-03,1.65283999990606389474e-04,1.82771799995862238574e-03,3.32094400005189527291e-03,0.0,64,2.20886707305908203125e+00);
INSERT INTO "iteration_metrics" VALUES(9,2,4,5.55919500000072730472e-02,1.79530597326984429364e+09,1.09799599999860220123e-02,1.51660999904379423242e-04,1.79216200012888293713e-03,0.00895520899996427,0.0,64,2.16782712936401367187e+00);
INSERT INTO "iteration_metrics" VALUES(10,2,5,6.72976729999845701968e-02,1.79530597328155040737e+09,1.17057229999772971495e-02,1.47806999962085683364e-04,1.90631500004201370757e-03,9.5415179999918109388e-03,0.0,64,2.090648651123046875e+00);
INSERT INTO "iteration_metrics" VALUES(11,2,6,7.60513899999750719871e-02,1.79530597329030418393e+09,8.7537169999905017903e-03,1.41826999993099889252e-04,1.61833999993632460245e-03,6.86727500010420044418e-03,0.0,64,2.06448769569396972656e+00);
INSERT INTO "iteration_metrics" VALUES(12,2,7,8.11260980000270137679e-02,1.79530597329537844656e+09,5.07470800005194178083e-03,1.37736000056065677199e-04,1.6499649999559551361e-03,3.14743700005237769801e-03,0.0,64,2.07341408729553222656e+00);
CREATE TABLE plan_groups (
	id INTEGER NOT NULL, 
	plan_id INTEGER NOT NULL, 
	"index" INTEGER NOT NULL, 
	jobs JSON NOT NULL, 
	devices JSON NOT NULL, 
	wave INTEGER NOT NULL, 
	predicted_period_ms DOUBLE NOT NULL, 
	predicted_gain DOUBLE NOT NULL, 
	PRIMARY KEY (id), 
	FOREIGN KEY(plan_id) REFERENCES plans (id)
);
INSERT INTO "plan_groups" VALUES(1,1,0,'["mlp-digits"]','["localhost:0", "localhost:1"]',0,9.11302449998174779466e+00,1.0);
CREATE TABLE plans (
	id INTEGER NOT NULL, 
	algo VARCHAR(20) NOT NULL, 
	body JSON NOT NULL, 
	predicted_aggregate_gain DOUBLE NOT NULL, 
	path TEXT, 
	created_at DATETIME NOT NULL, 
	PRIMARY KEY (id)
);
INSERT INTO "plans" VALUES(1,'matching','{"format": "xover-plan/1", "algo": "matching", "hosts": [["localhost", 2]], "groups": [{"jobs": ["mlp-digits"], "devices": ["localhost:0", "localhost:1"], "wave": 0, "predicted_period_ms": 9.113024499981748, "predicted_gain": 1.0, "predicted_duration_ms": 1822.6048999963496, "predicted_slowdown": {"mlp-digits": 1.0}}], "jobs": {"mlp-digits": {"devices": 2, "compute_ms": 1.8099400000437527, "comm_ms": 7.153350500004763, "memory_gb": 0.3822135925292969, "data_ms": 0.14973399993323255, "iterations": 200, "recipe": "recipes/mlp-digits.toml"}}, "unplaced": [], "predicted_aggregate_gain": 1.0, "predicted_makespan_ms": 1822.6048999963496, "sequential_makespan_ms": 1822.6048999963496}',1.0,'/tmp/oldplan.json','2026-11-22 00:06:14.960699');
CREATE TABLE profiles (
	id INTEGER NOT NULL, 
	recipe_id INTEGER NOT NULL, 
	recipe_hash VARCHAR(64) NOT NULL, 
	run_id INTEGER, 
	name VARCHAR(200) NOT NULL, 
	np INTEGER NOT NULL, 
	bandwidth VARCHAR(40) NOT NULL, 
	hardware TEXT NOT NULL, 
	iterations INTEGER NOT NULL, 
	data_ms DOUBLE NOT NULL, 
	compute_ms DOUBLE NOT NULL, 
	comm_ms DOUBLE NOT NULL, 
	iteration_ms DOUBLE NOT NULL, 
	samples_per_s DOUBLE NOT NULL, 
	memory_gb DOUBLE NOT NULL, 
	gradient_bytes INTEGER NOT NULL, 
	spread JSON NOT NULL, 
	created_at DATETIME NOT NULL, 
	PRIMARY KEY (id), 
	FOREIGN KEY(recipe_id) REFERENCES recipes (id), 
	FOREIGN KEY(run_id) REFERENCES runs (id)
);
INSERT INTO "profiles" VALUES(1,3,'43c5d46f12086326',2,'mlp-digits',2,'host','cpu:Intel(R) Xeon(R) Processor x2',6,1.49733999933232553303e-01,1.80994000004375266144e+00,7.15335050000476257991e+00,9.26578100001052,7425.65971910623,3.82213592529296875e-01,1204264,'{"data": {"p10_ms": 0.13773600005606568, "p90_ms": 0.18163900006129552}, "compute": {"p10_ms": 1.6183399999363246, "p90_ms": 2.013013000009778}, "comm": {"p10_ms": 3.1474370000523777, "p90_ms": 9.541517999991811}, "iteration": {"p10_ms": 5.074708000051942, "p90_ms": 11.705722999977297}}','2026-11-22 00:06:14.362859');
CREATE TABLE recipes (
	id INTEGER NOT NULL, 
	name VARCHAR(200) NOT NULL, 
	hash VARCHAR(64) NOT NULL, 
	path TEXT NOT NULL, 
	body JSON NOT NULL, 
	created_at DATETIME NOT NULL, 
	PRIMARY KEY (id), 
	UNIQUE (hash)
);
INSERT INTO "recipes" VALUES(1,'mlp-digits','1a3d2fa471106ce3','recipes/mlp-digits.toml','{"name": "mlp-digits", "model": "mlp", "dataset": "digits", "batch_size": 32, "optimizer": "sgd", "lr": 0.05, "np": 2, "seed": 1, "iterations": 4, "epochs": null, "momentum": 0.9, "weight_decay": 0.0, "eval_interval": 50, "description": "MLP 64-512-512-10 on scikit-learn digits", "model_options": {"hidden": 512, "layers": 2}, "dataset_options": {}}','2026-11-22 00:06:02.475706');
INSERT INTO "recipes" VALUES(2,'mlp-digits','2110e0ce9db0b9c7','recipes/mlp-digits.toml','{"name": "mlp-digits", "model": "mlp", "dataset": "digits", "batch_size": 32, "optimizer": "sgd", "lr": 0.05, "np": 2, "seed": 1, "iterations": 8, "epochs": null, "momentum": 0.9, "weight_decay": 0.0, "eval_interval": 50, "description": "MLP 64-512-512-10 on scikit-learn digits", "model_options": {"hidden": 512, "layers": 2}, "dataset_options": {}}','2026-11-22 00:06:09.230117');
INSERT INTO "recipes" VALUES(3,'mlp-digits','43c5d46f12086326','recipes/mlp-digits.toml','{"name": "mlp-digits", "model": "mlp", "dataset": "digits", "batch_size": 32, "optimizer": "sgd", "lr": 0.05, "np": 2, "seed": 1, "iterations": 200, "epochs": null, "momentum": 0.9, "weight_decay": 0.0, "eval_interval": 50, "description": "MLP 64-512-512-10 on scikit-learn digits", "model_options": {"hidden": 512, "layers": 2}, "dataset_options": {}}','2026-11-22 00:06:14.361855');
CREATE TABLE runs (
	id INTEGER NOT NULL, 
	experiment_id VARCHAR(40) NOT NULL, 
	recipe_id INTEGER NOT NULL, 
	name VARCHAR(200) NOT NULL, 
	mode VARCHAR(20) NOT NULL, 
	group_index INTEGER, 
	slot INTEGER, 
	engine VARCHAR(20) NOT NULL, 
	hosts TEXT NOT NULL, 
	np INTEGER NOT NULL, 
	devices TEXT, 
	iterations_planned INTEGER, 
	status VARCHAR(20) NOT NULL, 
	exit_code INTEGER, 
	error TEXT, 
	started_at DATETIME, 
	ended_at DATETIME, 
	log_dir TEXT, 
	gradient_bytes INTEGER, 
	peak_memory_gb DOUBLE, 
	PRIMARY KEY (id), 
	FOREIGN KEY(experiment_id) REFERENCES experiments (id), 
	FOREIGN KEY(recipe_id) REFERENCES recipes (id)
);
INSERT INTO "runs" VALUES(1,'20261122-000602-b4e0',1,'mlp-digits','solo',NULL,NULL,'horovod','localhost:2',2,'0,1',4,'finished',0,NULL,'2026-11-22 00:06:02.482969','2026-11-22 00:06:08.724213','/tmp/oldres/runs/20261122-000602-b4e0/1-mlp-digits-solo',1204264,3.7967681884765625e-01);
INSERT INTO "runs" VALUES(2,'20261122-000609-b114',2,'mlp-digits','profile',NULL,NULL,'horovod','localhost:2',2,'0,1',8,'finished',0,NULL,'2026-11-22 00:06:09.238911','2026-11-22 00:06:14.356285','/tmp/oldres/runs/20261122-000609-b114/2-mlp-digits-profile',1204264,3.82213592529296875e-01);
CREATE TABLE schema_info (
	id INTEGER NOT NULL, 
	version INTEGER NOT NULL, 
	written_by VARCHAR(32) NOT NULL, 
	PRIMARY KEY (id)
);
INSERT INTO "schema_info" VALUES(1,1,'0.1.0');
CREATE INDEX ix_recipes_name ON recipes (name);
CREATE INDEX ix_plan_groups_plan_id ON plan_groups (plan_id);
CREATE INDEX ix_runs_experiment_id ON runs (experiment_id);
CREATE INDEX ix_evaluations_run_id ON evaluations (run_id);
CREATE INDEX ix_profiles_key ON profiles (recipe_hash, np, bandwidth, hardware);
CREATE VIEW run_throughput AS
SELECT r.id AS run_id, r.experiment_id, r.name, r.mode, r.status, r.np,
       COUNT(m.id) AS iterations,
       SUM(m.samples) / NULLIF(SUM(m.iteration_s), 0) AS samples_per_s,
       AVG(m.iteration_s) AS mean_iteration_s
FROM runs r LEFT JOIN iteration_metrics m ON m.run_id = r.id AND m.step > 0
GROUP BY r.id;
COMMIT;
