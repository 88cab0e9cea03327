"""Pure scoring (the design card's entry point; the code is :mod:`spectrum_rft.task.reward`)."""

from spectrum_rft.task.reward import (REWARD_TABLE, REWARDS, AuditBars, Reward, ScanRecord, ScanScore, avail_iou,
                                      check_reward, episode_metrics, intersection, iou, match_count, match_iou, merge,
                                      occ_iou, regions, report_intervals, resolve_reward, reward_of, score_scan, total)

__all__ = ["REWARD_TABLE", "REWARDS", "AuditBars", "Reward", "ScanRecord", "ScanScore", "avail_iou", "check_reward",
           "episode_metrics", "intersection", "iou", "match_count", "match_iou", "merge", "occ_iou", "regions",
           "report_intervals", "resolve_reward", "reward_of", "score_scan", "total"]
