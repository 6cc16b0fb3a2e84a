"""Parameter counts of Hugging Face models built from the config.json files in a folder.

    python conformance/hf_param_counts.py configs/models > configs/models/hf_param_counts.json

Each file is a config.json (model_type + dimensions); the model is built by
transformers' AutoModelForCausalLM.from_config on the meta device (no weights are
allocated) and its parameters counted (a tied LM head once). The record is what
tests/trainer/model/gpt_test.cpp checks zrepro's counts against.
"""
import glob
import json
import os
import sys

import torch
import transformers
from transformers import AutoConfig, AutoModelForCausalLM


def main():
    counts = {}
    for path in sorted(glob.glob(os.path.join(sys.argv[1], "*.json"))):
        d = json.load(open(path))
        if "model_type" not in d:
            continue  # not a config.json (e.g. this script's own record)
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(AutoConfig.for_model(**d))
        counts[os.path.basename(path)] = sum(p.numel() for p in model.parameters())
    json.dump({"transformers": transformers.__version__, "torch": torch.__version__,
               "command": "python conformance/hf_param_counts.py configs/models",
               "params": counts}, sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()
