"""The main job (``job.run_pipeline``), its config and presets (``config``), the check of what a run
directory already holds (``resume``), and the job once per training seed (``seeds``)."""
