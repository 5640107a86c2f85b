"""Data preparation benchmark: preparing a corpus vs downloading what the fleet prepared.

Builds a corpus of at least --size-gb GB in a temp directory by concatenating the text files of
--from (default ../shared/data) over and over (never committed), starts a throwaway PostgreSQL,
ablate-server and two fresh workers one after the other, each on a one-run sweep over that
corpus, and prints:
  - time until a fresh worker trains its first step, when it prepares (trains the tokenizer,
    encodes the corpus, publishes the files) and when it downloads them from the fleet;
  - the tokenizer's encode throughput (MB/s of text, spm_encode as the worker runs it) and the
    tokenizer training time (on the first 256 MiB);
  - the breakdown from the workers' logs (text fetch, preparation, upload, download).

  /usr/bin/python3 bench/data/data_bench.py [--size-gb 1] [--vocab 4096] [--build DIR]
"""
import argparse
import datetime
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(SRC, "tests", "e2e"))


def build_corpus(sources, out_path, size):
    with open(out_path, "wb") as out:
        written = 0
        while written < size:
            for src in sources:
                with open(src, "rb") as f:
                    shutil.copyfileobj(f, out, 1 << 20)
                written = out.tell()
                if written >= size:
                    break
    return os.path.getsize(out_path)


def first_step_time(stack, run):
    pts = stack.metrics(run, ["train_loss"])
    times = [float(p["time"]) for p in pts if int(p["step"]) >= 1]
    return min(times) if times else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-gb", type=float, default=1.0)
    ap.add_argument("--vocab", type=int, default=4096)
    # ../shared/data beside the clone (or beside the main checkout, from a worktree under wt/).
    shared = [os.path.join(SRC, *[".."] * up, "shared", "data") for up in (1, 2)]
    ap.add_argument("--from", dest="sources", default=next((d for d in shared if os.path.isdir(d)), shared[0]))
    ap.add_argument("--build", default=os.path.join(SRC, "build"))
    ap.add_argument("--tmp", default=None, help="where the corpus and the stack live (default $TMPDIR)")
    args = ap.parse_args()
    os.environ["ABLATE_BINARY_DIR"] = os.path.abspath(args.build)
    os.environ["ABLATE_SOURCE_DIR"] = SRC
    sources = sorted(p for p in glob.glob(os.path.join(args.sources, "*.txt")))
    if not sources:
        sys.exit(f"data_bench: no .txt files in {args.sources}")
    root = tempfile.mkdtemp(prefix="ablate-data-bench-", dir=args.tmp)
    os.chmod(root, 0o755)
    data = os.path.join(root, "data")
    os.makedirs(data)
    t = time.time()
    size = build_corpus(sources, os.path.join(data, "corpus.txt"), int(args.size_gb * 1e9))
    shutil.copy(os.path.join(args.sources, "tinystories_valid.txt") if os.path.exists(
        os.path.join(args.sources, "tinystories_valid.txt")) else sources[0], os.path.join(data, "valid.txt"))
    print(f"data_bench: corpus {size / 1e9:.2f} GB from {len(sources)} files of {args.sources} "
          f"({time.time() - t:.0f} s to build)", flush=True)
    pg_dir = os.path.join(root, "pg")
    subprocess.check_call([os.path.join(SRC, "scripts", "dev-postgres"), "start", pg_dir], stdout=subprocess.DEVNULL)
    os.environ["ABLATE_TEST_PG_DIR"] = pg_dir
    import harness  # noqa: E402  (reads the environment set above)
    stack = harness.Stack(lease_seconds=30, data_dir=data)
    def body(name, seed):
        return (f"name: {name}\n"
                f"data: {{train: corpus.txt, val: valid.txt, tokenizer: {{type: bpe, vocab: {args.vocab}}}}}\n"
                "fixed: {n_embd: 32, n_head: 2, n_layer: 1, block_size: 64, batch_size: 4, steps: 3,"
                " warmup: 1, eval_every: 3, eval_batches: 1, probe_every: 3, log_every: 1,"
                " checkpoint_every: 100}\n"
                f"grid:\n  seed: [{seed}]\n")
    results = {}
    try:
        stack.start_server(extra=("--max-message-bytes", str(16 << 20)))
        for name, seed in (("preparer", 1), ("downloader", 2)):
            sweep = harness.write_sweep(stack.dir, name, body(f"bench-{name}", seed))
            sweep_id = stack.submit(sweep)
            started = time.time()
            stack.start_worker(name, threads=0)
            runs = stack.wait_sweep_done(sweep_id, 4 * 3600)
            run = runs[0]
            first = first_step_time(stack, int(run["id"]))
            results[name] = (first - started if first else None, stack.log(name), run["state"])
            stack.stop(name)
    finally:
        stack.close()
        subprocess.call([os.path.join(SRC, "scripts", "dev-postgres"), "stop", pg_dir], stdout=subprocess.DEVNULL)
        shutil.rmtree(root, ignore_errors=True)

    load = os.getloadavg()
    print(f"data_bench: {os.cpu_count()} CPU cores, load average at the end {load[0]:.1f} {load[1]:.1f} "
          f"{load[2]:.1f}; vocab {args.vocab}; tokenizer trained on the first 256 MiB")
    for name, (secs, log, state) in results.items():
        shown = f"{secs:.1f} s" if secs is not None else "n/a"
        print(f"  {name}: run {state}, time from worker start to its first training step: {shown}")
        stamps = re.findall(r"^(\S+) \w+ run \d+: (fetching data set|data key)", log, re.M)
        fetch = [t for t, what in stamps if what == "fetching data set"]
        key = [t for t, what in stamps if what == "data key"]
        if fetch and key:
            secs_text = (datetime.datetime.fromisoformat(key[0]) -
                         datetime.datetime.fromisoformat(fetch[0])).total_seconds()
            print(f"    fetched the text from the server (GetDataset) and hashed it: {secs_text:.1f} s")
        m = re.search(r"prepared in ([\d.]+)s \(tokenizer ([\d.]+)s; encoded ([\d.]+) MB in ([\d.]+)s, ([\d.]+) MB/s\)", log)
        if m:
            print(f"    prepared in {m.group(1)} s: tokenizer training {m.group(2)} s; "
                  f"encoded {m.group(3)} MB in {m.group(4)} s = {m.group(5)} MB/s (encode throughput)")
        m = re.search(r"published to the fleet \((\d+) files, ([\d.]+) MB, ([\d.]+)s\)", log)
        if m:
            print(f"    uploaded {m.group(1)} files, {m.group(2)} MB in {m.group(3)} s")
        m = re.search(r"downloaded prepared data from the fleet \((\d+) files, ([\d.]+) MB, ([\d.]+)s", log)
        if m:
            print(f"    downloaded {m.group(1)} files, {m.group(2)} MB in {m.group(3)} s")


if __name__ == "__main__":
    main()
