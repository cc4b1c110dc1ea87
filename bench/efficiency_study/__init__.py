"""The rollout-efficiency study that bench/efficiency.py runs, one module per purpose: design
(arms, regimes, cells, the plan), starts (starting models), runs (training the arms), measures
(one run's costs), stats (medians, paired intervals, verdicts), tables, plots, and results
(the results JSON, --restat); paths says where things live."""
