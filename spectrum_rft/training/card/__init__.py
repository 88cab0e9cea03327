"""The GSM8K score-centring GRPO card on TRL: the run (``card``), the data and exact-match reward
(``gsm8k``) and the run comparison with its drop verdict (``report``). Builds on the shared TRL plumbing one
folder up; never imports ``spectrum``."""
