"""The GRPO family: preset configs (``configs``), the one preset table (``presets``: name -> config, trainer),
trainers (``trainers``), dynamic sampling (the ``dynamic_sampling`` subpackage) and GSPO-token
(``gspo_token``). The public names are re-exported by ``trl_ext``; this package's ``__init__`` imports nothing, so a
module that needs only the group maths does not load the trainers."""
