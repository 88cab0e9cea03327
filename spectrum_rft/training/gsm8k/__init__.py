"""An experiment on another task, not the spectrum product: the GSM8K score-centring GRPO card on TRL (the design
write-up's): the run (``card``), the data and exact-match reward
(``data``) and the run comparison with its drop verdict (``report``). Builds on the shared TRL plumbing one
folder up; never imports ``spectrum``."""
