"""Training runs on the host: `loop.train(config)` runs a config to the end (checkpoints and
resume, evaluation, metrics rows and trackers, the NaN guard, progress and stop signals);
`policy` exports a trained team and loads it back (`marljax.load_policy`)."""
