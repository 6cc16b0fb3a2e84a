"""Mixture of experts under ZeRO-3 on 2 ranks whose tokens pick different experts: real
DeepSpeed beside zrepro, with the leaf module off and on (configs/scenarios/moe-divergent-gathers).

    python conformance/moe_zero3.py --zrepro build/zrepro --out conformance/results/moe-stage3-ranks2.json

(harness.py runs it as the case `moe-stage3-ranks2`; needs the venv of scripts/conformance.sh.)

Both sides train zrepro's tiny-mixtral (8 experts, top 2, expert weights 96x64 = 6,144 elements)
from the same weights on the same batches (each rank its own sample), seq 8, micro-batch 1,
3 steps, bf16, ZeRO-3 with the scenario's configs, "auto" filled as zrepro fills it (the
Hugging Face Trainer's rules: persistence threshold 10*h = 640, so the experts are gathered).
DeepSpeed trains transformers 4.x's Mixtral layout (ds_model.MixtralForCausalLM4x: one module
per expert, each fetched by its own ZeRO-3 hook). zrepro's --export-inputs refuses MoE models,
so the weights and batches are drawn here as zrepro draws them (ds_model.zrepro_inputs).

Runs, each side:
  leaf off   ds_config.json ("leaf_module": {"classes": []}): what happens, and where
  leaf on    fixed.json with "leaf_module": {"classes": ["MixtralSparseMoeBlock"]} (DeepSpeed's
             default classes are the fully qualified Hugging Face names, which a class defined
             here does not match; zrepro's default names the same class): losses per step
  fp32 check leaf on, bf16 off: the two networks' numerics (fp32 tolerance)
  aux        fp32 leaf on with output_router_logits (router_aux_loss_coef 0.1): zrepro's aux loss
             against transformers' own load_balancing_loss_func under DeepSpeed

On the DeepSpeed side every rank logs each torch.distributed collective before it is issued
(op, element counts, the module whose parameters DeepSpeed is fetching, or the gradient
bucket it is reducing) and when it returns; a run still going after --hang-timeout seconds
gets SIGUSR1 (faulthandler: every rank's Python stack) and its process group is killed.

The record keeps the leaf-on comparison in the shape of a training record (config,
zrepro_flags, rows: loss, grad_norm, first_grad_norm, and as the dense cases compare them
(compare.py memory_rows, comm_rows) per-rank bytes by category and collective bytes per step by
op, from the same live-tensor walk and collective counter as ds_run.py), which the CI record test
(tests/conformance/deepspeed_record_mpi_test.cpp) reruns with zrepro; beside them the parameter
count (params_row: not a row the CI test reads), where the bucket-buffer difference goes
(gathered_breakdown), and the rest under "runs".
"""
import argparse
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

CASE = "moe-stage3-ranks2"
SCENARIO = "configs/scenarios/moe-divergent-gathers"
RANKS, STEPS, SEED = 2, 3, 1234
# The scenario's flags (scenario.json "args"), with the rank count.
ZREPRO_FLAGS = ["--model", "tiny-mixtral", "--seq", "8", "--micro-batch", "1", "--grad-accum", "1",
                "--steps", str(STEPS), "--comm-timeout", "3", "--ranks", str(RANKS)]
# tiny-mixtral (trainer/config/model_spec.cpp) at --seq 8.
MODEL = {"name": "tiny-mixtral", "family": "llama", "model_type": "mixtral", "vocab": 128, "hidden": 64, "layers": 2,
         "heads": 4, "kv_heads": 2, "seq": 8, "experts": 8, "experts_per_tok": 2, "moe_intermediate": 96,
         "norm_eps": 1e-5, "rope_theta": 1e6, "tied": False}
LEAF_CLASS = "MixtralSparseMoeBlock"
AUX_COEF = 0.1  # large enough that the aux term is well above the fp32 tolerance
ENV = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1", OMPI_ALLOW_RUN_AS_ROOT="1",
           OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMPI_MCA_rmaps_base_oversubscribe="1", DS_ACCELERATOR="cpu",
           PYTHONUNBUFFERED="1")


# ---------------------------------------------------------------- the DeepSpeed side (one rank)

def worker(a):
    import faulthandler
    from ds_probe import CommCounter, memory_by_category, zero_convention

    state = {"step": -1, "phase": "init", "what": None, "hits": {}}
    rank_env = int(os.environ.get("RANK", "0"))
    calls = open(os.path.join(a.dir, f"calls.rank{rank_env}.jsonl"), "w", buffering=1)
    stacks = open(os.path.join(a.dir, f"stacks.rank{rank_env}.txt"), "w")
    faulthandler.register(signal.SIGUSR1, file=stacks, all_threads=True)
    with open(os.path.join(a.dir, f"pid.rank{rank_env}"), "w") as f:
        f.write(str(os.getpid()))

    class CallLog(CommCounter):
        """Every collective, logged before it is issued and when the call returns (for an
        async_op call, as DeepSpeed's parameter all-gathers are, that is when it is queued:
        DeepSpeed waits on the handle later), and counted by op and bytes while enabled
        (CommCounter: ds_run.py's per-step collective bytes)."""
        n = 0

        def _wrap(self, op, fn):
            fn = CommCounter._wrap(self, op, fn)

            def logged(*args, **kwargs):
                i = CallLog.n
                CallLog.n += 1
                tensors = [x for x in list(args[:2]) + list(kwargs.values())[:2] if not isinstance(x, (int, str))]
                numels = [sum(t.numel() for t in tensors_of(x)) for x in tensors]
                dtypes = sorted({str(t.dtype).replace("torch.", "") for x in tensors for t in tensors_of(x)})
                calls.write(json.dumps({"i": i, "op": op, "numel": numels, "dtype": dtypes, "step": state["step"],
                                        "phase": state["phase"], "what": state["what"],
                                        "async": bool(kwargs.get("async_op", False))}) + "\n")
                out = fn(*args, **kwargs)
                calls.write(json.dumps({"i": i, "done": True}) + "\n")
                return out
            return logged

    def tensors_of(x):
        import torch
        if isinstance(x, torch.Tensor):
            return [x]
        if isinstance(x, (list, tuple)):
            return [t for t in x if isinstance(t, torch.Tensor)]
        return []

    counter = CallLog()  # before deepspeed binds torch.distributed's functions

    import deepspeed
    import torch
    import torch.distributed as dist
    from deepspeed.runtime.zero.partitioned_param_coordinator import PartitionedParameterCoordinator as Coordinator
    from deepspeed.runtime.zero.stage3 import DeepSpeedZeroOptimizer_Stage3 as Stage3
    from ds_model import load, micro_batch

    torch.set_num_threads(1)
    deepspeed.init_distributed(dist_backend="gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    model, layout, tokens = load(a.inputs)
    if a.aux_coef is not None:
        model.router_aux_loss_coef = a.aux_coef
    names = {id(m): n or "(root)" for n, m in model.named_modules()}
    pnames = {id(p): n for n, p in model.named_parameters()}

    # What DeepSpeed is doing when it issues a collective: fetching a module's parameters
    # (forward or backward), checking the trace, or reducing a gradient bucket.
    fetch, reset, reduce_name = Coordinator.fetch_sub_module, Coordinator.reset_step, \
        "_DeepSpeedZeroOptimizer_Stage3__reduce_and_partition_ipg_grads"
    reduce = getattr(Stage3, reduce_name)

    def labelled(fn, label):
        def wrapped(*args, **kwargs):
            was, state["what"] = state["what"], label(*args, **kwargs)
            try:
                return fn(*args, **kwargs)
            finally:
                state["what"] = was
        return wrapped
    Coordinator.fetch_sub_module = labelled(fetch, lambda self, m, forward: "fetch {} ({})".format(
        names.get(id(m), type(m).__name__), "forward" if forward else "backward"))
    Coordinator.reset_step = labelled(reset, lambda self: "reset_step (trace check)")
    setattr(Stage3, reduce_name, labelled(reduce, lambda self, dtype: "reduce-scatter bucket [" + ", ".join(
        pnames.get(id(p), "?") for p in self.ipg_buckets[dtype].params) + "]"))

    # Which experts ran (their pre-forward hooks, registered before DeepSpeed's).
    for n, m in model.named_modules():
        if type(m).__name__ == "MixtralBlockSparseTop2MLP":
            layer, e = int(n.split(".")[2]), int(n.split(".")[-1])

            def ran(mod, inp, layer=layer, e=e):
                if state["phase"] == "forward":
                    state["hits"].setdefault(str(state["step"]), {}).setdefault(str(layer), []).append(e)
                    calls.write(json.dumps({"expert": [layer, e], "step": state["step"]}) + "\n")
            m.register_forward_pre_hook(ran)

    config = json.load(open(a.config))
    result = {"rank": rank, "world": world, "steps": [], "hits": state["hits"]}
    out_path = os.path.join(a.dir, f"result.rank{rank}.json")

    def save():
        with open(out_path + ".tmp", "w") as f:
            json.dump(result, f, indent=1)
        os.replace(out_path + ".tmp", out_path)
    # The parameter count of the network DeepSpeed trains (before ZeRO-3 partitions it, and
    # as its partitioned parameters remember it).
    result["params"] = {"numel": sum(p.numel() for p in model.parameters())}
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.ordered, config=config)
    result["params"]["ds_numel"] = sum(getattr(p, "ds_numel", p.numel()) for p in model.parameters())
    # The live-tensor walk at ds_run.py's points: after initialize, inside step 0's backward once
    # the last gradient (the embedding's) exists, after that backward, and after the last step;
    # and at the end of step 1's forward (the gathered parameters, for byte_rows' breakdown).
    memory = result["memory"] = {"init": memory_by_category(engine, model)}
    probe = {"armed": False}

    def in_backward(param):
        if probe["armed"]:
            probe["armed"] = False
            was, counter.enabled = counter.enabled, False
            memory["backward"] = memory_by_category(engine, model)
            counter.enabled = was
    model.wte.weight.register_post_accumulate_grad_hook(in_backward)
    result["leaf_modules"] = [n for n, m in model.named_modules() if getattr(m, "_z3_leaf", False)]
    result["persistent_params"] = sorted(n for n, p in model.named_parameters() if getattr(p, "ds_persist", False))
    result["zero_stage"] = engine.zero_optimization_stage()
    save()
    for step in range(a.steps):
        state["step"] = step
        inputs, targets = micro_batch(tokens, layout, step, 0, rank)
        probe["armed"] = step == 0
        counter.enabled = True
        state["phase"] = "forward"
        loss = engine(inputs, targets)
        if step == 1:  # the trace complete: the gathered parameters DeepSpeed keeps for the backward
            counter.enabled = False
            memory["forward_end_step1"] = memory_by_category(engine, model)
            counter.enabled = True
        state["phase"] = "backward"
        engine.backward(loss)
        if step == 0:  # one micro-step per step: every backward ends at the boundary
            counter.enabled = False
            memory["boundary"] = memory_by_category(engine, model)
            counter.enabled = True
        state["phase"] = "step"
        engine.step()
        counter.enabled = False
        issued = counter.take()
        norm = engine.get_global_grad_norm()
        result["steps"].append({"step": step, "local_loss": float(loss.detach()),
                                "grad_norm": float(norm) if norm is not None else None,
                                "comm_bytes": zero_convention(issued, world),
                                "comm_calls": {op: sum(1 for c in issued if c["op"] == op)
                                               for op in {c["op"] for c in issued}}})
        save()
        if rank == 0:
            print(f"[moe] step={step + 1}/{a.steps} loss={float(loss):.5f}", flush=True)
    memory["after_step"] = memory_by_category(engine, model)
    state["phase"] = "done"
    result["finished"] = True
    save()


# ---------------------------------------------------------------- the driver

def run(cmd, timeout, log, pid_dir=None):
    """(exit code or None when killed after `timeout` s, seconds, output). A run that
    outlives the timeout: every rank dumps its Python stack (SIGUSR1), then its process
    group, which this call started, is killed."""
    t0 = time.time()
    with open(log, "w") as f:
        p = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=ENV, start_new_session=True, cwd=ROOT)
        try:
            rc = p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            rc = None
            for r in range(RANKS) if pid_dir else ():
                try:
                    os.kill(int(open(os.path.join(pid_dir, f"pid.rank{r}")).read()), signal.SIGUSR1)
                except (OSError, ValueError):
                    pass
            time.sleep(3)
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    return rc, time.time() - t0, open(log, errors="replace").read()


def zrepro_run(zrepro, config, out, extra=()):
    cmd = [zrepro, "run", "--config", config, "--out", out] + ZREPRO_FLAGS + list(extra)
    rc, s, log = run(cmd, 600, out + ".log")
    work = os.path.dirname(out)
    summary = json.load(open(os.path.join(out, "summary.json"))) if os.path.exists(
        os.path.join(out, "summary.json")) else {}
    rec = {"command": shlex.join(["zrepro"] + cmd[1:]).replace(ROOT + "/", "").replace(work + "/", "WORK/"),
           "exit_code": rc,
           "seconds": round(s, 1), "status": summary.get("status"),
           "losses": [x["loss"] for x in summary.get("steps", [])],
           "grad_norms": [x["grad_norm"] for x in summary.get("steps", [])]}
    f = summary.get("failure")
    if f:
        rec["failure"] = f.get("message")
        if f.get("hang"):
            rec["where"] = f["hang"].get("text", "").strip().rstrip(";")
    experts = summary.get("model", {}).get("experts", {})
    rec["experts_fetched"] = experts.get("fetched")
    if rc not in (0, None) and not f:
        rec["log_tail"] = log[-1500:]
    return rec, summary


def filled(file_cfg, summary, leaf_classes=None, bf16=True):
    """The scenario config with "auto" resolved as zrepro resolved it (its effective config:
    the Hugging Face Trainer's rules) and the optimizer and clipping zrepro trains with made
    explicit (a Trainer hands DeepSpeed its own AdamW)."""
    eff = {e["key"]: e["value"] for e in summary["effective_config"]["entries"]}

    def fill(c, path=""):
        return {k: fill(v, f"{path}{k}.") if isinstance(v, dict) else (eff[path + k] if v == "auto" else v)
                for k, v in c.items()}
    cfg = fill(file_cfg)
    cfg["bf16"] = {"enabled": bf16}
    cfg["gradient_clipping"] = eff["gradient_clipping"]
    cfg["optimizer"] = {"type": eff["optimizer.type"],
                        "params": {k: eff[f"optimizer.params.{k}"] for k in ("lr", "betas", "eps", "weight_decay")}}
    if leaf_classes is not None:
        cfg["zero_optimization"]["leaf_module"] = {"classes": leaf_classes}
    cfg["steps_per_print"] = 1000
    return cfg


def call_log(d, r):
    """Rank r's logged records (calls.rank<r>.jsonl), skipping a line cut by the kill."""
    path = os.path.join(d, f"calls.rank{r}.jsonl")
    for line in open(path) if os.path.exists(path) else ():
        try:
            yield json.loads(line)
        except json.JSONDecodeError:
            continue


def read_calls(d):
    """Per rank: the collectives in order, each with done = whether it returned."""
    out = {}
    for r in range(RANKS):
        seq = {}
        for c in call_log(d, r):
            if "expert" in c:
                continue  # an expert that ran (read_experts)
            if c.get("done"):
                seq[c["i"]]["done"] = True
            else:
                seq[c["i"]] = dict(c, done=False)
        out[r] = [seq[i] for i in sorted(seq)]
    return out


def read_experts(d):
    """Per rank, per step, per layer: the experts that ran in the forward (logged as they
    start, so a run that dies in its first forward still says which ran)."""
    out = {}
    for r in range(RANKS):
        hits = {}
        for c in call_log(d, r):
            if "expert" in c:
                hits.setdefault(str(c["step"]), {}).setdefault(str(c["expert"][0]), []).append(c["expert"][1])
        out[str(r)] = hits
    return out


def short(c):
    if c is None:
        return "issued nothing more"
    return f"{c['op']}(numel {'/'.join(str(x) for x in c['numel'])}) {c['what'] or ''}".strip()


def describe(c):
    if c is None:
        return "issued nothing more"
    n = "/".join(str(x) for x in c["numel"])
    ret = "async: queued" if c.get("async") else "returned"
    return (f"#{c['i']} {c['op']}({', '.join(c['dtype'])}, numel {n}) [{c['what'] or 'no fetch'}; step {c['step']} "
            f"{c['phase']}; {ret if c['done'] else 'the call did not return'}]")


def first_divergence(calls, same=lambda c: (c["op"], tuple(c["numel"]))):
    """Where the ranks' collective sequences first differ (by default op or sizes: what a
    transport can notice), or where one rank issued a collective the other never did or one
    did not return: (index, {rank: description}), or (None, {})."""
    n = max((len(s) for s in calls.values()), default=0)
    for i in range(n):
        here = {r: (s[i] if i < len(s) else None) for r, s in calls.items()}
        keys = {same(c) if c else None for c in here.values()}
        if len(keys) > 1 or any(c and not c["done"] for c in here.values()):
            return i, here
    return None, {}


def position(calls, i):
    """Collective i of rank 0 counted within its step and phase, by op: "step 0 forward,
    all_gather_into_tensor #26 (0-based) of the phase" (zrepro numbers a run's collectives
    from its first step; DeepSpeed's log also counts those of deepspeed.initialize)."""
    c = calls[0][i]
    same = [x for x in calls[0][:i] if x["step"] == c["step"] and x["phase"] == c["phase"] and x["op"] == c["op"]]
    return f"step {c['step']} {c['phase']}, {c['op']} #{len(same)} of the phase (0-based)"


def outcome(rc, log):
    if rc is None:
        return "hang"
    return "ran" if rc == 0 else "raised"


def error_text(log):
    """What the ranks raised: the first distinct error lines of the log (a C++ exception
    that terminates a rank prints "terminate called ..." and "what(): ..." unprefixed)."""
    keep = []
    for line in log.splitlines():
        s = line.strip()
        if any(k in s for k in ("Error:", "Error(", "Exception:", "terminate called", "what():", "disagreement",
                                "tracing error")) and "ChildFailedError" not in s and s not in keep:
            keep.append(s)
    return keep[:6]


def rank_exits(log):
    """torchrun's failure summary: each failed rank's exit code (a signal: -6 SIGABRT)."""
    return {m.group(1): m.group(2).strip() for m in re.finditer(
        r"rank\s*:\s*(\d+) \(local_rank: \d+\)\s*\n\s*exitcode\s*:\s*([^\n(]*(?:\([^\n]*\))?)", log)}


def raising_frames(log):
    """Per rank that raised a Python exception: its innermost DeepSpeed frames (nvtx wrappers
    left out), outermost first."""
    frames = {}
    for m in re.finditer(r"\[rank(\d+)\]:\s+File \"[^\"]*/site-packages/deepspeed/([^\"]+)\", line (\d+), in (\w+)",
                         log):
        if m.group(2) != "utils/nvtx.py":
            frames.setdefault(m.group(1), []).append(f"{m.group(2)}:{m.group(3)} {m.group(4)}")
    return {r: " > ".join(f[-3:]) for r, f in frames.items()}


def deepspeed_run(name, inputs, cfg, work, timeout, port, aux_coef=None):
    d = os.path.join(work, name)
    os.makedirs(d, exist_ok=True)
    cfg_path = os.path.join(d, "ds_config.json")
    json.dump(cfg, open(cfg_path, "w"), indent=1)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(RANKS), "--master_port", str(port),
           os.path.abspath(__file__), "worker", "--inputs", inputs, "--config", cfg_path, "--steps", str(STEPS),
           "--dir", d] + (["--aux-coef", str(aux_coef)] if aux_coef is not None else [])
    rc, s, log = run(cmd, timeout, os.path.join(d, "deepspeed.log"), pid_dir=d)
    results = {}
    for r in range(RANKS):
        p = os.path.join(d, f"result.rank{r}.json")
        if os.path.exists(p):
            results[r] = json.load(open(p))
    calls = read_calls(d)
    i, where = first_divergence(calls)
    # Earlier collectives that matched in op and size but fetched different modules on the
    # two ranks: they complete, each rank assembling its own shard and the other's of
    # different experts.
    j, paired = first_divergence(calls, same=lambda c: (c["op"], tuple(c["numel"]), c["what"]))
    rec = {"config": cfg, "exit_code": rc, "seconds": round(s, 1), "outcome": outcome(rc, log),
           "command": "DS_ACCELERATOR=cpu OMP_NUM_THREADS=1 python -m torch.distributed.run --nproc_per_node 2 "
                      "conformance/moe_zero3.py worker --inputs INPUTS --config ds_config.json --steps 3 --dir DIR",
           "collectives_per_rank": {str(r): len(c) for r, c in calls.items()},
           "leaf_modules": results.get(0, {}).get("leaf_modules"),
           "persistent_params": results.get(0, {}).get("persistent_params")}
    done = [results[r]["steps"] for r in sorted(results)]
    if done and all(len(x) == len(done[0]) for x in done):
        rec["losses"] = [sum(s[k]["local_loss"] for s in done) / len(done) for k in range(len(done[0]))]
        rec["grad_norms"] = [done[0][k]["grad_norm"] for k in range(len(done[0]))]
    rec["local_losses"] = {str(r): [x["local_loss"] for x in results[r]["steps"]] for r in results}
    rec["experts_run"] = read_experts(d)
    if i is not None:
        rec["divergence"] = {"index": i, "position": position(calls, i),
                             "ranks": {str(r): describe(c) for r, c in where.items()},
                             "short": "; ".join(f"rank {r} {short(c)}" for r, c in where.items())}
    if j is not None and j != i:
        rec["silent_pairing"] = {"index": j, "position": position(calls, j),
                                 "ranks": {str(r): describe(c) for r, c in paired.items()},
                                 "short": "; ".join(f"rank {r} {short(c)}" for r, c in paired.items()),
                                 "note": "same op and size, different parameters: the collective completes and "
                                         "each rank gets a mix of two experts' shards"}
        rec["last_calls"] = {str(r): [describe(c) for c in s[max(0, i - 3):i + 2]] for r, s in calls.items()}
    if rc != 0:
        # Ports and process ids change from run to run: left out of the record.
        log = re.sub(r"\(pid: \d+\)\s*", "", re.sub(r"\[127\.0\.0\.1\]:\d+", "[127.0.0.1]:PORT", log))
        rec["errors"] = error_text(log)
        rec["rank_exits"] = rank_exits(log)
        rec["raised_in"] = raising_frames(log)
        rec["log_tail"] = log[-2500:]
    if rc is None:
        rec["stacks"] = {}
        for r in range(RANKS):
            p = os.path.join(d, f"stacks.rank{r}.txt")
            text = open(p, errors="replace").read() if os.path.exists(p) else ""
            # faulthandler's dump, the current (main) thread first, innermost frame first.
            rec["stacks"][str(r)] = [ln.strip() for ln in text.splitlines() if ln.strip()][:16]
    rec["ranks"] = [{"rank": r, "memory": results[r].get("memory", {}), "steps": results[r]["steps"],
                     "params": results[r].get("params")} for r in sorted(results)]
    return rec, calls


def side_by_side(zrepro_out, calls):
    """zrepro's issued collectives (its flight recorder's dump, OUT/flight/rank<r>.json:
    completed or failed, not the ones it had only scheduled ahead) against DeepSpeed's
    all-gathers of the same step, one for one: op, sizes and the parameter (DeepSpeed's
    fetched module mapped to zrepro's name). Per rank: how many agree, and the first
    that does not."""
    import ds_model
    layers, _ = ds_model.moe_layout(MODEL)
    to_zrepro = {}
    for layer in layers:
        for prm in layer["params"]:
            hf = ds_model.HfLlama.hf_name(ds_model.MixtralForCausalLM4x, layer["name"], prm["name"])
            to_zrepro[hf.rsplit(".", 1)[0]] = f"{layer['name']}.{prm['name']}"
    out = {}
    for r, ds_calls in calls.items():
        path = os.path.join(zrepro_out, "flight", f"rank{r}.json")
        if not os.path.exists(path):
            continue
        z = [e for e in json.load(open(path))["entries"] if e["state"] != "scheduled"]
        steps = {e["step"] for e in z}
        d = [c for c in ds_calls if c["step"] in steps and c["what"] and c["what"].startswith("fetch ")]
        agree, first = 0, None
        for ze, dc in zip(z, d):
            module = dc["what"].split(" ")[1]
            mine = ("all_gather", ze["out_numel"], ze["in_numel"], ze["label"].replace("unshard ", ""), ze["step"])
            theirs = (dc["op"].replace("_into_tensor", ""), dc["numel"][0], dc["numel"][1],
                      to_zrepro.get(module, module), dc["step"])
            if mine != theirs:
                first = {"zrepro": f"#{ze['seq']} {ze['op']}(out {ze['out_numel']}, in {ze['in_numel']}) {ze['label']}",
                         "deepspeed": describe(dc)}
                break
            agree += 1
        out[str(r)] = {"zrepro_issued": len(z), "deepspeed_fetch_gathers": len(d), "agree_in_order": agree,
                       "first_difference": first}
    return out


def rel(a, b):
    return 0.0 if a == b else abs(a - b) / max(abs(b), 1e-30)


def rows(z, d, tol):
    """The training record's rows (compare.py training_rows) from the two runs' lists."""
    out = []
    for key, zk, dk in (("loss", "losses", "losses"), ("grad_norm", "grad_norms", "grad_norms")):
        zs, ds = z.get(zk) or [], d.get(dk) or []
        diffs = [rel(x, y) for x, y in zip(zs, ds)]
        worst = max(diffs) if diffs else None
        out.append({"what": key, "zrepro": zs, "deepspeed": ds, "max_rel_diff": worst, "tolerance": tol[key],
                    "ok": worst is not None and worst <= tol[key] and len(zs) == len(ds) == STEPS})
    zf = (z.get("grad_norms") or [None])[0]
    df = (d.get("grad_norms") or [None])[0]
    r = rel(zf, df) if zf is not None and df is not None else None
    out.append({"what": "first_grad_norm", "zrepro": zf, "deepspeed": df, "rel_diff": r,
                "tolerance": tol["first_grad_norm"], "ok": r is not None and r <= tol["first_grad_norm"]})
    return out


def byte_rows(case, summary, metrics, d):
    """What the dense cases compare beyond losses (compare.py memory_rows and comm_rows, their
    conventions and tolerances): per-rank bytes by category, and collective bytes per step by op
    on rank 0 after the first step. DeepSpeed's side needs every rank's memory walk."""
    import compare
    ranks = [x for x in d.get("ranks", []) if x["memory"].get("after_step")]
    if len(ranks) != RANKS:
        return []
    ds = {"ranks": ranks, "world": RANKS}
    return compare.memory_rows(summary, ds) + compare.comm_rows(metrics, ds)


def gathered_breakdown(summary, d):
    """Where the bytes.bucket_buffers row's difference goes (cases.py KNOWN_GAPS): at ZeRO-3
    zrepro files the gathered (non-persistent) parameters under comm_buffers, DeepSpeed's walk
    under params (param.data; the params row reads it after the step, when only the persistent
    ones are whole). Rank 0 at the end of step 1's forward, the trace complete: zrepro's
    comm_buffers there (memory.timeline, rank 0) less its reduce bucket (comm_buffers in the
    step phase) against DeepSpeed's param.data less the persistent parameters (param.data
    after the step), and the two buckets."""
    rank0 = next((x for x in d.get("ranks", []) if x["rank"] == 0), None)
    fwd = next((e for e in summary["memory"]["timeline"] if e["step"] == 1 and e["phase"] == "forward"), None)
    step = next((e for e in summary["memory"]["timeline"] if e["phase"] == "step"), None)
    if rank0 is None or "forward_end_step1" not in rank0["memory"] or fwd is None or step is None:
        return None
    m = rank0["memory"]
    whole = m["forward_end_step1"]["sources"].get("params", {}).get("param", 0)
    persistent = m["after_step"]["sources"].get("params", {}).get("param", 0)
    z_bucket, z_all = step["by_category"]["comm_buffers"], fwd["by_category"]["comm_buffers"]
    out = {"rank": 0, "point": "end of step 1's forward",
           "zrepro_comm_buffers": z_all, "zrepro_reduce_bucket": z_bucket, "zrepro_gathered": z_all - z_bucket,
           "deepspeed_param_data": whole, "deepspeed_persistent": persistent,
           "deepspeed_gathered": whole - persistent,
           "deepspeed_bucket_buffers": m["forward_end_step1"]["bytes"]["bucket_buffers"]}
    out["gathered_agree"] = out["zrepro_gathered"] == out["deepspeed_gathered"]
    out["bucket_agree"] = out["zrepro_reduce_bucket"] == out["deepspeed_bucket_buffers"]
    return out


def params_row(summary, d):
    """The parameter count: sum of numel over the network DeepSpeed trains (before ZeRO-3
    partitions it; every rank's ds_numel sum must say the same) against zrepro's model.params."""
    counts = sorted({x["params"]["numel"] for x in d.get("ranks", []) if x.get("params")} |
                    {x["params"]["ds_numel"] for x in d.get("ranks", []) if x.get("params")})
    theirs = counts[0] if len(counts) == 1 else None
    ours = summary["model"]["params"]
    return {"what": "model.params", "zrepro": ours, "deepspeed": theirs, "deepspeed_counts": counts,
            "rel_diff": rel(ours, theirs) if theirs is not None else None, "tolerance": 0.0,
            "ok": theirs is not None and ours == theirs,
            "deepspeed_module": "conformance/ds_model.py MixtralForCausalLM4x"}


def summarise(side, leaf, r):
    """One line of the rendered table: (side, leaf modules, outcome, where, losses)."""
    if side == "zrepro":
        o = {0: "ran", 4: "hang (exit 4)"}.get(r["exit_code"], f"exit {r['exit_code']}")
        where = r.get("where", "")
    else:
        o = {"hang": f"hang (killed after {r['seconds']:.0f} s)", "ran": "ran", "raised": "raised"}[r["outcome"]]
        if r["outcome"] == "raised":
            exits = r.get("rank_exits", {})
            o += ": " + "; ".join(re.sub(r" This is typically caused.*$", "", e.replace(
                "/__w/pytorch/pytorch/third_party/", "")) for e in r.get("errors", [])[:3])
            if exits:
                o += " (exits: " + ", ".join(f"rank {k} {v}" for k, v in sorted(exits.items())) + ")"
            if r.get("raised_in"):
                o += "; raised in " + "; ".join(f"rank {k}: {v}" for k, v in sorted(r["raised_in"].items()))
        where = ""
        if r.get("divergence"):
            dv = r["divergence"]
            where = f"{dv['position']} (collective #{dv['index']} since init): {dv['short']}"
            if r.get("silent_pairing"):
                sp = r["silent_pairing"]
                where += (f". Before it, from {sp['position']}, same-size gathers of different experts "
                          f"completed ({sp['short']})")
    losses = " -> ".join(f"{x:.5f}" for x in r.get("losses") or []) or "-"
    return {"side": side, "leaf": leaf, "outcome": o, "where": where, "losses": losses}


def notes(z_off, d_off):
    """What the leaf-off runs say side by side, in words (render.py prints them)."""
    out = []
    sbs = d_off.get("zrepro_side_by_side") or {}
    dv = d_off.get("divergence")
    same = sbs and all(x["first_difference"] is None and x["agree_in_order"] == x["zrepro_issued"]
                       for x in sbs.values())
    if same and dv and z_off.get("status") == "hang":
        out.append(f"Leaf off, both sides stop at the same collective: DeepSpeed's {dv['position']} is zrepro's "
                   "collective #" + dv["position"].split("#")[1].split(" ")[0] + " (zrepro numbers from the first "
                   "step; DeepSpeed's log also counts the collectives of deepspeed.initialize), with the same "
                   "parameter on each rank, and zrepro's issued collectives up to it (the failing one included) equal "
                   "DeepSpeed's all-gathers of that forward one for one in op, sizes and parameter (" + ", ".join(
                       f"rank {k}: {x['agree_in_order']} of {x['zrepro_issued']}" for k, x in sorted(sbs.items()))
                   + ").")
    elif sbs:
        out.append("Leaf off, the two sides' collectives differ: " + json.dumps(sbs))
    if d_off["outcome"] == "raised" and z_off.get("status") == "hang":
        out.append("The outcome differs in kind: zrepro reports a hang (exit 4, the mismatch caught before any data "
                   "moved), what an NCCL job shows when the watchdog fires; DeepSpeed on gloo (this record) does "
                   "not hang: gloo sees the size mismatch when the bytes arrive, aborts the rank that expected fewer "
                   "(SIGABRT) and the other raises on the reset connection. NCCL is not run here.")
    elif d_off["outcome"] == "ran":
        out.append("DeepSpeed ran through with the leaf module off, where zrepro stopped: **zrepro diverges**.")
    if d_off.get("silent_pairing"):
        sp = d_off["silent_pairing"]
        out.append(f"Before the failing collective, from DeepSpeed's {sp['position']}, the ranks all-gather "
                   f"different experts of the same size ({sp['short']}): those collectives complete and each rank "
                   "assembles its own shard with the other rank's shard of another expert. Neither gloo nor zrepro's "
                   "diagnosis (which compares ops and sizes) flags them; the first collective whose size differs "
                   "is where both stop.")
    return out


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "worker":
        ap = argparse.ArgumentParser()
        ap.add_argument("worker")
        ap.add_argument("--inputs", required=True)
        ap.add_argument("--config", required=True)
        ap.add_argument("--steps", type=int, required=True)
        ap.add_argument("--dir", required=True)
        ap.add_argument("--aux-coef", type=float, default=None)
        worker(ap.parse_args())
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("--zrepro", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--work", default=None)
    ap.add_argument("--hang-timeout", type=int, default=120)
    ap.add_argument("--port", type=int, default=29950)
    a = ap.parse_args()
    import cases as C
    import record
    import ds_model

    work = os.path.abspath(a.work or tempfile.mkdtemp(prefix="zrepro-moe-"))
    os.makedirs(work, exist_ok=True)
    zrepro = os.path.abspath(a.zrepro)
    scen = os.path.join(ROOT, SCENARIO)
    off_cfg = json.load(open(os.path.join(scen, "ds_config.json")))
    on_cfg = json.load(open(os.path.join(scen, "fixed.json")))
    fp32_cfg = json.loads(json.dumps(on_cfg))
    fp32_cfg["bf16"]["enabled"] = False
    json.dump(fp32_cfg, open(os.path.join(work, "fixed-fp32.json"), "w"), indent=1)

    t0 = time.time()
    print("[moe] zrepro: leaf off, leaf on, fp32 leaf on", flush=True)
    z_off, s_off = zrepro_run(zrepro, os.path.join(scen, "ds_config.json"), os.path.join(work, "zrepro-leaf-off"))
    z_on, s_on = zrepro_run(zrepro, os.path.join(scen, "fixed.json"), os.path.join(work, "zrepro-leaf-on"))
    z_32, s_32 = zrepro_run(zrepro, os.path.join(work, "fixed-fp32.json"), os.path.join(work, "zrepro-fp32"))
    z_aux, s_aux = zrepro_run(zrepro, os.path.join(work, "fixed-fp32.json"), os.path.join(work, "zrepro-aux"),
                              ["--output-router-logits", "--router-aux-loss-coef", str(AUX_COEF)])
    for r, cfg in ((z_off, SCENARIO + "/ds_config.json"), (z_on, SCENARIO + "/fixed.json"),
                   (z_32, "fixed.json with bf16.enabled false"), (z_aux, "fixed.json with bf16.enabled false")):
        r["config"] = cfg
    if not s_on or s_on.get("status") != "ok":
        raise SystemExit(f"zrepro's leaf-on run failed: {z_on}")

    inputs = os.path.join(work, "inputs")
    layout = ds_model.zrepro_inputs(inputs, MODEL, SEED, STEPS, 1, 1, RANKS)
    if layout["params"] != s_on["model"]["params"]:
        raise SystemExit(f"the drawn model has {layout['params']} parameters, zrepro's {s_on['model']['params']}")

    print("[moe] DeepSpeed: leaf off", flush=True)
    d_off, off_calls = deepspeed_run("deepspeed-leaf-off", inputs, filled(off_cfg, s_off or s_on), work,
                                     a.hang_timeout, a.port)
    d_off["zrepro_side_by_side"] = side_by_side(os.path.join(work, "zrepro-leaf-off"), off_calls)
    print(f"[moe]   {d_off['outcome']} ({d_off['seconds']:.0f} s)", flush=True)
    print("[moe] DeepSpeed: leaf on", flush=True)
    d_on, _ = deepspeed_run("deepspeed-leaf-on", inputs, filled(on_cfg, s_on, [LEAF_CLASS]), work, 600, a.port + 1)
    print(f"[moe]   {d_on['outcome']} ({d_on['seconds']:.0f} s)", flush=True)
    print("[moe] DeepSpeed: fp32 leaf on", flush=True)
    d_32, _ = deepspeed_run("deepspeed-fp32", inputs, filled(on_cfg, s_32, [LEAF_CLASS], bf16=False), work, 600,
                            a.port + 2)
    print(f"[moe]   {d_32['outcome']} ({d_32['seconds']:.0f} s)", flush=True)
    print("[moe] DeepSpeed: fp32 leaf on, router aux loss", flush=True)
    d_aux, _ = deepspeed_run("deepspeed-aux", inputs, filled(on_cfg, s_aux, [LEAF_CLASS], bf16=False), work, 600,
                             a.port + 3, aux_coef=AUX_COEF)
    print(f"[moe]   {d_aux['outcome']} ({d_aux['seconds']:.0f} s)", flush=True)

    on_rows = rows(z_on, d_on, C.BF16_TOL)
    z_metrics = [json.loads(line) for line in open(os.path.join(work, "zrepro-leaf-on", "metrics.jsonl"))]
    on_rows += byte_rows(CASE, s_on, z_metrics, d_on)
    count = params_row(s_on, d_on)
    breakdown = gathered_breakdown(s_on, d_on)
    if not count["ok"]:
        count["cause"] = C.known_gap(CASE, count["what"])
    fp32_rows = rows(z_32, d_32, {"loss": C.FP32_TOL, "grad_norm": C.FP32_TOL, "first_grad_norm": C.FP32_TOL})
    aux_rows = rows(z_aux, d_aux, {"loss": C.FP32_TOL, "grad_norm": C.FP32_TOL, "first_grad_norm": C.FP32_TOL})
    # The aux term itself: each side's loss less its own run without it (same weights and batches).
    aux_terms = {"zrepro": [a - b for a, b in zip(z_aux.get("losses", []), z_32.get("losses", []))],
                 "deepspeed": [a - b for a, b in zip(d_aux.get("losses", []), d_32.get("losses", []))]}
    for row in on_rows + fp32_rows + aux_rows:
        if not row["ok"]:
            row["cause"] = C.known_gap(CASE, row["what"])
    for d in (d_off, d_on, d_32, d_aux):
        d.pop("ranks", None)  # the walks and per-step counts: the rows carry what is compared
    table = [summarise("zrepro", "off", z_off), summarise("DeepSpeed", "off", d_off),
             summarise("zrepro", "on", z_on), summarise("DeepSpeed", "on", d_on),
             summarise("zrepro", "on, fp32", z_32), summarise("DeepSpeed", "on, fp32", d_32),
             summarise("zrepro", "on, fp32, aux", z_aux), summarise("DeepSpeed", "on, fp32, aux", d_aux)]
    rec_notes = notes(z_off, d_off)
    rec = {
        "case": CASE, "kind": "moe_divergence", "ranks": RANKS, "steps": STEPS,
        # The shape of a training record for the CI test: the leaf-on config and flags, rows.
        "config": on_cfg, "zrepro_flags": ZREPRO_FLAGS, "tolerance": C.BF16_TOL, "rows": on_rows,
        "zrepro": {"exit_code": z_on["exit_code"], "seconds": z_on["seconds"]},
        "deepspeed": {"exit_code": d_on["exit_code"], "seconds": d_on["seconds"], "command": d_on["command"]},
        "fp32_rows": fp32_rows,
        # output_router_logits with router_aux_loss_coef AUX_COEF: zrepro's aux loss against
        # transformers' load_balancing_loss_func under DeepSpeed (fp32, leaf on).
        "aux": {"router_aux_loss_coef": AUX_COEF, "rows": aux_rows, "aux_terms": aux_terms,
                "zrepro_flags": ["--output-router-logits", "--router-aux-loss-coef", str(AUX_COEF)],
                "deepspeed_side": "ds_model.MixtralForCausalLM4x + transformers.models.mixtral.modeling_mixtral."
                                  "load_balancing_loss_func (the transformers release in versions)"},
        # Not in "rows": the CI record test reads a row it does not know as a collective (comm.<op>).
        "params_row": count,
        "gathered_breakdown": breakdown,
        "model": dict(MODEL, params=layout["params"],
                      deepspeed_module="conformance/ds_model.py MixtralForCausalLM4x (transformers 4.x layout)"),
        "inputs": "drawn by conformance/ds_model.py zrepro_inputs (zrepro's gpt_init and MarkovData; "
                  "zrepro run --export-inputs refuses MoE models)",
        "runs": {"zrepro": {"leaf_off": z_off, "leaf_on": z_on, "fp32_leaf_on": z_32, "fp32_aux": z_aux},
                 "deepspeed": {"leaf_off": d_off, "leaf_on": d_on, "fp32_leaf_on": d_32, "fp32_aux": d_aux}},
        "table": table, "notes": rec_notes,
        "hang_timeout_s": a.hang_timeout,
        "versions": record.versions(), "recorded": time.strftime("%Y-%m-%d"),
        "command": "scripts/conformance.sh --only " + CASE,
        "seconds": round(time.time() - t0, 1),
    }
    record.write(a.out, rec)
    for t in table:
        print(f"[moe] {t['side']:9s} leaf {t['leaf']:8s} {t['outcome'][:90]} | {t['where'][:160]} | {t['losses']}",
              flush=True)


if __name__ == "__main__":
    main()
