"""The package's results are the CLI's --json output, value for value."""

import json
import subprocess

import numpy as np
import pytest

import moe_paging_sim as mps
from conftest import PROSE


def test_main_job_is_the_clis(cli):
    # README's main job: sim run --policy e2 --trace traces/data/granite/prose.bin
    got = mps.run({"policy": "e2"}, PROSE)
    assert got == cli("run", "--policy", "e2", "--trace", PROSE, "--json")
    assert got["inputs"]["trace"] == PROSE


def test_main_job_on_a_loaded_trace_is_the_clis(cli):
    got = mps.run({"policy": "e2"}, mps.Trace.load(PROSE))
    assert got == cli("run", "--policy", "e2", "--trace", PROSE, "--json")


def test_timed_run_on_the_embedded_trace_is_the_clis(cli):
    # README question 3, on the embedded prose trace (no --trace)
    spec = {"policy": "e2", "evict": "lru", "budget": "25%", "batch": 8, "hw": "rtx4060-laptop-wddm"}
    got = mps.run(spec)
    want = cli("run", "--policy", "e2", "--evict", "lru", "--budget", "25%", "--batch", "8",
               "--hw", "rtx4060-laptop-wddm", "--json")
    assert got == want
    assert got["timing"]["tokens_per_s"] > 0


def test_sweep_is_the_clis(cli):
    spec = {"policies": ["e1", "e2"], "evict": "lru,belady", "budget": ["25%", "50%"]}
    got = mps.sweep(spec, PROSE)
    want = cli("sweep", "--policies", "e1", "--policies", "e2", "--evict", "lru,belady",
               "--budget", "25%,50%", "--trace", PROSE, "--json")
    assert got == want
    # 2 mechanisms x 2 policies x 2 budgets x the sweep's default splits (global, per-layer)
    assert len(got) == 16
    df = mps.to_pandas(got)
    assert len(df) == 16 and "cache.page_ins" in df.columns
    assert list(df["cache.page_ins"]) == [row["cache"]["page_ins"] for row in got]


def test_plan_is_the_clis(cli):
    spec = {"policies": "e1,e2", "evict": "lru", "hw": "rtx4060-laptop-wddm", "context": 1024}
    got = mps.plan(spec, PROSE)
    want = cli("plan", "--policies", "e1,e2", "--evict", "lru", "--hw", "rtx4060-laptop-wddm",
               "--context", "1024", "--trace", PROSE, "--json")
    assert got == want


def test_stats_are_the_clis(cli):
    assert mps.stats(PROSE) == cli("trace", "stats", PROSE, "--json")
    assert mps.stats(PROSE, "all") == cli("trace", "stats", PROSE, "--json", "--phase", "all")


def test_gen_writes_the_clis_trace(sim_bin, tmp_path):
    t = mps.gen(preset="olmoe-1b-7b", tokens=12, sequences=2, skew=1.0, locality=0.3, seed=7)
    t.save(tmp_path / "py.bin")
    subprocess.run([sim_bin, "trace", "gen", "--preset", "olmoe-1b-7b", "--tokens", "12",
                    "--sequences", "2", "--skew", "1.0", "--locality", "0.3", "--seed", "7", "--out", str(tmp_path / "cli.bin")],
                   check=True, capture_output=True)
    assert (tmp_path / "py.bin").read_bytes() == (tmp_path / "cli.bin").read_bytes()


def test_export_writes_the_clis_csv(sim_bin, tmp_path):
    mps.export(PROSE, "csv", tmp_path / "py.csv", phase="all")
    subprocess.run([sim_bin, "trace", "export", "--format", "csv", PROSE, "--phase", "all",
                    "--out", str(tmp_path / "cli.csv")], check=True, capture_output=True)
    assert (tmp_path / "py.csv").read_bytes() == (tmp_path / "cli.csv").read_bytes()


def prose_arrays():
    """The prose trace's one request as vLLM returns it: prompt then generated tokens."""
    t = mps.Trace.load(PROSE)
    pre, dec = t.routed_experts(0, "prefill"), t.routed_experts(0, "decode")
    return np.concatenate([pre, dec]), len(pre)


def test_arrays_route_as_the_file_they_came_from():
    # The same routing, through NumPy arrays with the header's geometry given by hand
    # (granite: hidden 1024, expert FFN 512, 32 experts), streams the same bytes.
    arr, prompt = prose_arrays()
    assert arr.shape == (103, 24, 8) and prompt == 39
    t = mps.Trace.from_arrays([arr.astype(np.int32)], [prompt], names=["english_prose"],
                              num_experts=32, hidden_size=1024, expert_ffn=512)
    got = mps.run({"policy": "e2", "evict": "lru", "budget": "50%"}, t)
    want = mps.run({"policy": "e2", "evict": "lru", "budget": "50%"}, PROSE)
    assert got["streaming"] == want["streaming"]
    assert got["cache"] == want["cache"]
    assert got["inputs"]["trace"] == "arrays"
    np.testing.assert_array_equal(t.routed_experts(0, "decode"), arr[prompt:])


def test_import_of_saved_arrays_is_from_arrays(tmp_path):
    arr, prompt = prose_arrays()
    np.save(tmp_path / "req0.npy", arr.astype(np.int64))
    imported = mps.import_trace(tmp_path / "req0.npy", "vllm-routed-experts", prompt_tokens=prompt)
    built = mps.Trace.from_arrays([arr], [prompt], names=["req0"])
    assert imported.sequences == built.sequences == ["req0"]
    for phase in ("prefill", "decode"):
        np.testing.assert_array_equal(imported.routed_experts(0, phase), built.routed_experts(0, phase))


def test_fortran_order_and_small_dtypes_read_in_logical_order():
    arr, prompt = prose_arrays()
    a = mps.Trace.from_arrays([np.asfortranarray(arr.astype(np.uint8))], [prompt])
    np.testing.assert_array_equal(a.routed_experts(0, "prefill"), arr[:prompt])


def test_compare_is_the_clis_results_json(sim_bin, tmp_path):
    spec = {"policies": "e1,e2", "evict": "lru", "budget": "25%"}
    got = mps.compare(spec, [PROSE])
    subprocess.run([sim_bin, "compare", "--trace", PROSE, "--policies", "e1,e2", "--evict", "lru",
                    "--budget", "25%", "--out", str(tmp_path / "report")],
                   check=True, capture_output=True)
    want = json.loads((tmp_path / "report" / "results.json").read_text())
    assert got == want
    # every run of the grid is in the result (the CLI says "wrote 6 of 6 runs")
    assert got["total_runs"] == len(got["runs"]) == 6


def test_runs_in_threads_give_the_sequential_results():
    # The GIL is released during runs: four threads at once, each result as run alone.
    from concurrent.futures import ThreadPoolExecutor

    specs = [{"policy": p, "evict": "lru", "budget": b} for p in ("e1", "e2") for b in ("25%", "50%")]
    alone = [mps.run(s, PROSE) for s in specs]
    with ThreadPoolExecutor(4) as pool:
        together = list(pool.map(lambda s: mps.run(s, PROSE), specs))
    assert together == alone
    assert alone[0] != alone[1]


def test_sglang_arrays_are_the_sglang_importers(tmp_path):
    # An SGLang response as the server sends it (int32 little-endian, base64, flat), imported
    # from a file by the CLI's importer and decoded in Python as SGLang's docs do.
    import base64

    arr, prompt = prose_arrays()
    flat = base64.b64encode(arr.astype("<i4").tobytes()).decode()
    line = {"meta_info": {"id": "r0", "prompt_tokens": prompt, "routed_experts": flat}}
    (tmp_path / "resp.jsonl").write_text(json.dumps(line) + "\n")
    imported = mps.import_trace(tmp_path / "resp.jsonl", "sglang-routed-experts", moe_layers=24, top_k=8)
    decoded = np.frombuffer(base64.b64decode(flat), np.int32).reshape(-1, 24, 8)
    built = mps.Trace.from_arrays([decoded], [prompt], names=["r0"], format="sglang-routed-experts")
    assert imported.sequences == built.sequences == ["r0"]
    for phase in ("prefill", "decode"):
        np.testing.assert_array_equal(imported.routed_experts(0, phase), built.routed_experts(0, phase))
    spec = {"policy": "e1", "expert_mib": 3}
    assert mps.run(spec, imported)["streaming"] == mps.run(spec, built)["streaming"]


def test_spec_values_become_the_clis_flags(cli):
    # True: a bare flag; False and None: left out; underscores: dashes; numbers as written
    spec = {"policy": "e1", "evict": "lru", "budget": "50%", "vs_belady": True,
            "timeline": None, "progress": False, "granule_mib": 2}
    got = mps.run(spec, PROSE)
    want = cli("run", "--policy", "e1", "--evict", "lru", "--budget", "50%", "--vs-belady",
               "--granule-mib", "2", "--trace", PROSE, "--json")
    assert got == want and "vs_belady" in got
