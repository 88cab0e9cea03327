"""Training the spectrum task on TRL: the environment adapter (``trl_env``), datasets (``trl_data``), the
``sft``/``train`` commands (``trl_run``), the grouped and grammar-constrained GRPO sampler (``sampler``),
scan-episode evaluation (``scan_eval``), a checkpoint served to the evaluator (``serve``) and the memory
verdict (``memory_report``). Builds on the shared TRL plumbing one folder up; never imports ``card``."""
