"""Honest programs pass (issue 24, part 3): a corpus of correct solutions using the standard
library's common modules and the preloaded packages, run in one batch on a fully isolated
pool. Before the fix ``tempfile`` failed (the fork server had fixed the temp directory before
the child set ``TMPDIR``) and so did ``multiprocessing.pool.ThreadPool`` (its semaphore lives
in ``/dev/shm``, which Landlock denied)."""

from __future__ import annotations

import textwrap

import pytest

from vigor_cli.sandbox import Job, Limits, SandboxPool

LIMITS = Limits(timeout_s=10.0, memory_mb=512)

# name -> (program, stdin, expected stdout)
CORPUS: dict[str, tuple[str, str, str]] = {
    "collections": ("""
        from collections import Counter, OrderedDict, defaultdict, deque, namedtuple
        words = input().split()
        c = Counter(words)
        d = defaultdict(list)
        for i, w in enumerate(words):
            d[w].append(i)
        q = deque(words, maxlen=3)
        q.rotate(1)
        P = namedtuple("P", "x y")
        o = OrderedDict.fromkeys("cab")
        o.move_to_end("c")
        print(c.most_common(1)[0], dict(d)["b"], list(q), P(1, 2).y, "".join(o))
        """, "a b a c b a\n", "('a', 3) [1, 4] ['a', 'c', 'b'] 2 abc\n"),
    "heapq": ("""
        import heapq
        xs = list(map(int, input().split()))
        h = []
        for x in xs:
            heapq.heappush(h, -x)
        print(-heapq.heappop(h), heapq.nsmallest(2, xs), list(heapq.merge([1, 4], [2, 3])))
        """, "5 1 9 3\n", "9 [1, 3] [1, 2, 3, 4]\n"),
    "bisect": ("""
        import bisect
        a = []
        for x in map(int, input().split()):
            bisect.insort(a, x)
        print(a, bisect.bisect_left(a, 4), bisect.bisect_right(a, 4))
        """, "4 2 4 8\n", "[2, 4, 4, 8] 1 3\n"),
    "functools": ("""
        import sys
        from functools import cache, cmp_to_key, lru_cache, partial, reduce
        sys.setrecursionlimit(10000)
        @lru_cache(maxsize=None)
        def fib(n):
            return n if n < 2 else fib(n - 1) + fib(n - 2)
        @cache
        def f(n):
            return 1 if n == 0 else n * f(n - 1) % 1000000007
        key = cmp_to_key(lambda a, b: (a > b) - (a < b))
        print(fib(300) % 1000, f(3000), reduce(lambda a, b: a * b, range(1, 6)),
              sorted([3, 1, 2], key=key), partial(pow, 2)(10))
        """, "", "600 {f3000} 120 [1, 2, 3] 1024\n"),
    "itertools": ("""
        from itertools import accumulate, combinations, groupby, permutations, product
        s = input()
        print(len(list(permutations(s))), list(combinations(range(4), 3))[-1],
              list(accumulate([1, 2, 3])), len(list(product("ab", repeat=3))),
              [(k, len(list(g))) for k, g in groupby("aabccc")])
        """, "abcd\n", "24 (1, 2, 3) [1, 3, 6] 8 [('a', 2), ('b', 1), ('c', 3)]\n"),
    "fractions": ("""
        from fractions import Fraction
        a, b = map(Fraction, input().split())
        print(a + b, a * b, (a / b).limit_denominator(10))
        """, "1/3 3/4\n", "13/12 1/4 4/9\n"),
    "decimal": ("""
        from decimal import ROUND_HALF_UP, Decimal, getcontext
        getcontext().prec = 30
        x = Decimal(input())
        print(x.sqrt(), (x / 3).quantize(Decimal("0.01"), rounding=ROUND_HALF_UP))
        """, "2\n", "1.41421356237309504880168872421 0.67\n"),
    "re": ("""
        import re
        text = input()
        pattern = re.compile(r"(\\w+)=(\\d+)")
        print(pattern.findall(text), re.sub(r"\\d", "#", text), bool(re.fullmatch(r"[a-z=0-9 ]+", text)))
        """, "a=1 bb=22\n", "[('a', '1'), ('bb', '22')] a=# bb=## True\n"),
    "threading_deep_recursion": ("""
        import sys, threading
        sys.setrecursionlimit(1 << 20)
        threading.stack_size(1 << 26)
        def depth(n):
            return 0 if n == 0 else 1 + depth(n - 1)
        out = []
        def main():
            out.append(depth(int(input())))
        t = threading.Thread(target=main)
        t.start()
        t.join()
        lock = threading.Lock()
        total = [0]
        def add():
            for _ in range(1000):
                with lock:
                    total[0] += 1
        workers = [threading.Thread(target=add) for _ in range(4)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        print(out[0], total[0])
        """, "100000\n", "100000 4000\n"),
    "tempfile": ("""
        import os, tempfile
        with tempfile.TemporaryFile() as f:
            f.write(b"abc")
            f.seek(0)
            a = f.read()
        with tempfile.NamedTemporaryFile("w+", delete=False) as g:
            g.write("named")
            name = g.name
        b = open(name).read()
        os.unlink(name)
        with tempfile.TemporaryDirectory() as d:
            open(os.path.join(d, "x"), "w").write("in dir")
            c = open(os.path.join(d, "x")).read()
        print(a.decode(), b, c, os.access(tempfile.gettempdir(), os.W_OK))
        """, "", "abc named in dir True\n"),
    "thread_pool": ("""
        from multiprocessing.pool import ThreadPool
        with ThreadPool(4) as pool:
            print(sum(pool.map(lambda x: x * x, range(100))))
        """, "", "328350\n"),
    "multiprocessing_primitives": ("""
        import multiprocessing as mp
        import threading
        lock, value, queue = mp.Lock(), mp.Value("i", 0), mp.Queue()
        def work():
            with lock:
                value.value += 1
        threads = [threading.Thread(target=work) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        queue.put(value.value)
        print(queue.get(timeout=5))
        """, "", "3\n"),
    "concurrent_futures": ("""
        from concurrent.futures import ThreadPoolExecutor
        with ThreadPoolExecutor(max_workers=3) as ex:
            print(list(ex.map(str.upper, input().split())))
        """, "ab cd\n", "['AB', 'CD']\n"),
    "array": ("""
        from array import array
        a = array("i", map(int, input().split()))
        a.append(7)
        print(a.tolist(), len(a.tobytes()), a.itemsize)
        """, "1 2 3\n", "[1, 2, 3, 7] 16 4\n"),
    "statistics": ("""
        import statistics
        xs = list(map(int, input().split()))
        print(statistics.mean(xs), statistics.median(xs), statistics.mode(xs),
              round(statistics.pstdev(xs), 4))
        """, "1 2 2 3 7\n", "3 2 2 2.0976\n"),
    "numpy": ("""
        import numpy as np
        a = np.array([[2.0, 1.0], [1.0, 3.0]])
        x = np.linalg.solve(a, np.array([3.0, 5.0]))
        v = np.sort(np.array(list(map(int, input().split()))))
        print(np.round(x, 6).tolist(), v.tolist(), int(v.cumsum()[-1]))
        """, "3 1 2\n", "[0.8, 1.4] [1, 2, 3] 6\n"),
    "sortedcontainers": ("""
        from sortedcontainers import SortedDict, SortedList
        s = SortedList(map(int, input().split()))
        s.add(0)
        d = SortedDict({"b": 2, "a": 1})
        print(list(s), s.bisect_left(3), list(d.keys()))
        """, "5 3 4\n", "[0, 3, 4, 5] 1 ['a', 'b']\n"),
    "stack_rlimit_idiom": ("""
        import resource, sys
        resource.setrlimit(resource.RLIMIT_STACK, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
        sys.setrecursionlimit(10 ** 6)
        def depth(n):
            return 0 if n == 0 else 1 + depth(n - 1)
        print(depth(int(input())))
        """, "50000\n", "50000\n"),
    "stdin_forms": ("""
        import sys
        first = sys.stdin.buffer.readline()
        rest = sys.stdin.buffer.read().split()
        print(first.decode().strip(), sum(map(int, rest)))
        """, "head\n1 2\n3\n", "head 6\n"),
    "open_dev_stdin": ("""
        data = open("/dev/stdin").read().split()
        print(len(data))
        """, "a b c\n", "3\n"),
    "files_in_cwd_and_home": ("""
        import os, pickle, json
        os.makedirs("sub/dir", exist_ok=True)
        with open("sub/dir/data.pkl", "wb") as f:
            pickle.dump({"k": [1, 2]}, f)
        home = os.path.expanduser("~")
        with open(os.path.join(home, "note.json"), "w") as f:
            json.dump([3], f)
        print(pickle.load(open("sub/dir/data.pkl", "rb")), json.load(open(os.path.join(home, "note.json"))))
        """, "", "{'k': [1, 2]} [3]\n"),
    "misc_stdlib": ("""
        import copy, dataclasses, datetime, enum, hashlib, math, operator, queue, random, string, struct
        @dataclasses.dataclass(order=True)
        class P:
            x: int
        class C(enum.Enum):
            A = 1
        q = queue.Queue()
        q.put(5)
        random.seed(1)
        r = random.randint(1, 10)
        print(math.comb(10, 3), math.isqrt(99), math.gcd(12, 18),
              (datetime.date(2024, 3, 1) - datetime.date(2024, 2, 1)).days,
              hashlib.sha256(b"x").hexdigest()[:8], struct.pack("<I", 1).hex(),
              string.ascii_lowercase[:3], operator.itemgetter(1)([4, 5]), C.A.value,
              sorted([P(2), P(1)])[0].x, copy.deepcopy([[1]]), q.get(), 1 <= r <= 10)
        """, "", "120 9 6 29 2d711642 01000000 abc 5 1 1 [[1]] 5 True\n"),
    "sqlite_in_memory": ("""
        import sqlite3
        db = sqlite3.connect(":memory:")
        db.execute("create table t (x int)")
        db.executemany("insert into t values (?)", [(1,), (2,), (3,)])
        print(db.execute("select sum(x) from t").fetchone()[0])
        """, "", "6\n"),
    "big_output": ("""
        import sys
        n = int(input())
        sys.stdout.write("\\n".join(map(str, range(n))) + "\\n")
        """, "100000\n", "".join(f"{i}\n" for i in range(100000))),
    "exit_and_quit": ("""
        print("before")
        exit()
        print("after")
        """, "", "before\n"),
}


def _f3000() -> int:
    value = 1
    for n in range(1, 3001):
        value = value * n % 1000000007
    return value


@pytest.fixture(scope="module")
def corpus_runs():
    with SandboxPool(workers=2) as pool:
        names = sorted(CORPUS)
        jobs = [Job(textwrap.dedent(CORPUS[n][0]), CORPUS[n][1].encode(), LIMITS) for n in names]
        yield pool.isolation, dict(zip(names, pool.run(jobs)))


def test_corpus_is_large_enough():
    assert len(CORPUS) >= 20


def test_the_corpus_runs_under_full_isolation(corpus_runs):
    isolation, _ = corpus_runs
    assert isolation == "full"


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_honest_program_passes(corpus_runs, name):
    _, runs = corpus_runs
    run = runs[name]
    expected = CORPUS[name][2].replace("{f3000}", str(_f3000()))
    assert run.outcome == "ok", (run.outcome, run.detail, run.stderr_head)
    assert run.stdout.decode() == expected, run.stderr_head
