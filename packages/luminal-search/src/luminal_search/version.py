"""The search version: part of every cache key, bumped when rules, candidates or the plan
format change, so plans found by an older search are searched again."""

SEARCH_VERSION = "luminal-search-3"
