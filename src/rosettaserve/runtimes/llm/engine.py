"""The generation engine: one thread, continuous batching over a KV cache per sequence.

Each iteration of the engine thread:
  1. drops sequences whose client went away (their KV cache goes with them);
  2. admits waiting requests by priority, then fairly between API keys (up to ``max_num_seqs``
     sequences prefilling or running), taking what the prefix cache holds of their prompts;
  3. runs one prefill pass of at most ``IDLE_PASS_FACTOR`` x ``prefill_chunk_tokens`` tokens
     over the prompts being prefilled: prompts admitted together share it; while sequences
     decode, a prompt longer than ``prefill_chunk_tokens`` is prefilled a chunk of that size
     per iteration, the long ones sharing one chunk (prefill.py);
     a prompt whose last chunk ran chooses its first token and joins
     (when no sequence was decoding, a burst reaching an idle engine, the requests already
     read by their event loops are gathered first, and the prompts that arrive meanwhile are
     admitted and prefilled too, up to ``FRESH_PREFILL_PASSES`` passes);
  4. decodes one token for every running sequence in one batched forward pass;
  5. hands the deltas to each request's event loop in one call per loop, and waits until the
     loop has passed them on (stream.py: ``hand_over``).
Requests join and leave the batch between steps. ``generate`` refuses a request (Overloaded)
past ``max_num_seqs + max_waiting`` sequences, shared between API keys (capacity.py), so latency
cannot grow without bound. ``submit`` with a ``Resume`` starts a sequence from elsewhere than
its prompt and can stop it after its prefill (prefill/decode disaggregation, see resume.py);
with ``kv_budget_tokens`` a request waits until its KV cache fits, and a preemptible sequence is
dropped (``Preempted``) when the running ones outgrow the budget.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import threading
import time
from collections import defaultdict, deque
from typing import Any

import torch

from rosettaserve.core.errors import InvalidInput, ModelError, ServingError
from rosettaserve.core.generate import GenerateRequest, GeneratorInfo, SamplingParams
from rosettaserve.core.share import SHARE
from rosettaserve.runtimes.llm.accept import Deltas
from rosettaserve.runtimes.llm.batch import KV, DecodeBatch, Runner
from rosettaserve.runtimes.llm.capacity import Capacity
from rosettaserve.runtimes.llm.detok import (
    IncrementalDetokenizer,
    StopText,
    decoder,
    encoder,
    eos_ids,
)
from rosettaserve.runtimes.llm.grammar import Grammars
from rosettaserve.runtimes.llm.kv_port import KvPort
from rosettaserve.runtimes.llm.prefill import PrefillJob, plan, run
from rosettaserve.runtimes.llm.prefix_cache import PrefixCache
from rosettaserve.runtimes.llm.prompt_bound import max_prompt_chars
from rosettaserve.runtimes.llm.prompts import max_new_tokens, prompt_ids
from rosettaserve.runtimes.llm.resume import (
    Preempted,
    Resume,
    generator_state,
    kv_usage,
    set_generator_state,
    victims,
)
from rosettaserve.runtimes.llm.sampling import TokenState, logprobs
from rosettaserve.runtimes.llm.state import EngineConfig, EngineStats, Group, Sequence, kv_tokens
from rosettaserve.runtimes.llm.stream import GenerationStream, Item, caught_up, hand_over
from rosettaserve.runtimes.llm.switch import SWITCH_INTERVAL_S, SwitchInterval
from rosettaserve.scheduling.fair_share import Clock, enqueue

log = logging.getLogger("rosettaserve.llm")
# Prefill passes an iteration may run before its decode step when no sequence was decoding.
FRESH_PREFILL_PASSES = 4
# How long a burst reaching an idle engine may gather before its first prefill pass (the
# requests whose bytes have arrived are passed on by their loops and join it).
GATHER_WAIT_S = 0.010
GATHER_ROUNDS = 4
# A pass takes at most this many times ``prefill_chunk_tokens`` (1,152 tokens by default: a
# burst of 32 chat prompts in one pass); while sequences decode, prompts longer than a chunk
# share one chunk of it (prefill.plan).
IDLE_PASS_FACTOR = 12
__all__ = ["SWITCH_INTERVAL_S", "Engine", "EngineConfig", "EngineStats", "SwitchInterval"]


_switch_interval = SwitchInterval()


class Engine:
    def __init__(
        self, model: Any, tokenizer: Any, config: EngineConfig, device: torch.device
    ) -> None:
        self.tokenizer = tokenizer
        self.config = config
        self.runner = Runner(model, device)
        self.batch = DecodeBatch(self.runner)
        self.vocab = int(model.get_output_embeddings().weight.shape[0])
        self.eos_ids = eos_ids(model, tokenizer)
        self.special_ids = set(getattr(tokenizer, "all_special_ids", []) or [])
        self._decode_skip = decoder(tokenizer, skip_special_tokens=True)
        self._decode_all = decoder(tokenizer, skip_special_tokens=False)
        self.deltas = Deltas(self.eos_ids, self.special_ids, self._decode_all)
        self._encode = encoder(tokenizer)
        rows = max(config.max_num_seqs, config.max_n)  # a decode step's, a prefill's
        self.grammars = Grammars(tokenizer, self.vocab, self.eos_ids, rows)
        self.info = GeneratorInfo(
            model_id=config.model_id,
            max_model_len=config.max_model_len,
            max_n=min(config.max_n, config.max_num_seqs),  # all n sequences decode together
            max_num_seqs=config.max_num_seqs,
            max_waiting=config.max_waiting,
            max_stop_sequences=config.max_stop_sequences,
            dtype=str(next(model.parameters()).dtype).removeprefix("torch."),
            device=str(device),
            special_ids=frozenset(self.special_ids),
            created=int(time.time()),
            options=config.options,
            max_prompt_chars=max_prompt_chars(tokenizer, config.max_model_len),
        )
        self._cond = threading.Condition()
        self._waiting: deque[Group] = deque()  # by priority, then fairly between API keys
        self._clock = Clock()  # (scheduling/fair_share.py)
        self._running: list[Sequence] = []  # in batch row order
        self._prefilling: list[PrefillJob] = []  # admitted, in admission order
        self.prefix_cache = PrefixCache(config.prefix_cache_tokens, config.prefix_block_tokens)
        # sequences submitted and not yet finished or dropped, by API key
        self.capacity = Capacity(config.max_num_seqs + config.max_waiting)
        self._stopping = False
        self._outbox: dict[asyncio.AbstractEventLoop, list[tuple[GenerationStream, Item]]] = (
            defaultdict(list)
        )
        self.stats = EngineStats()
        self.kv = KvPort(self)  # the KV cache hand-over (prefill/decode disaggregation)
        self._thread = threading.Thread(target=self._run, name="rosetta-llm", daemon=True)
        self._holds_interval = False  # whether this engine counts in ``_switch_interval``

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> None:
        # the event loops get the interpreter back within a fraction of a step (switch.py)
        _switch_interval.engine_started()
        self._holds_interval = True
        self._thread.start()

    def stop(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify()
        self._thread.join(timeout=30)
        if self._holds_interval:
            self._holds_interval = False
            _switch_interval.engine_stopped()

    @property
    def active(self) -> int:
        return self.capacity.active

    # -- submitting (event loop thread) ---------------------------------------------------------

    def generate(self, request: GenerateRequest) -> GenerationStream:
        return self.submit(request, self.prompt_ids(request))

    def submit(
        self, request: GenerateRequest, prompt_ids: list[int], resume: Resume | None = None
    ) -> GenerationStream:
        """Enqueue ``request`` on these prompt ids (``resume``: from elsewhere, see resume.py)."""
        max_new = self._max_new_tokens(request.sampling, len(prompt_ids))
        if not 1 <= request.n <= self.info.max_n:
            raise InvalidInput(f"n must be in [1, {self.info.max_n}], got {request.n}")
        stream = GenerationStream(asyncio.get_running_loop(), request.n, self._wake)
        seed = resume.seed if resume else None
        seqs = [
            self._sequence(stream, i, prompt_ids, request.sampling, max_new, seed=seed)
            for i in range(request.n)
        ]
        if resume is not None:
            for seq in seqs:
                set_generator_state(seq.tokens.generator, resume.sampler_state)
                seq.preemptible = resume.preemptible
        share = SHARE.get()  # whose request: its API key's (core/share.py)
        with self._cond:
            self.capacity.take(seqs, share)
            group = Group(stream, prompt_ids, seqs, resume)  # its cost: the tokens it may hold
            enqueue(self._waiting, self._clock, group, request.n * (len(prompt_ids) + max_new))
            self._cond.notify()
        return stream

    def resume(
        self, request: GenerateRequest, prompt_ids: list[int], prior: list[int], emit_prior: bool
    ) -> GenerationStream:
        """``request`` going on after ``prior``, its cache computed here again (see resume.py)."""
        return self.submit(request, prompt_ids, Resume(prior=prior, emit_prior=emit_prior))

    def prompt_ids(self, request: GenerateRequest) -> list[int]:
        return prompt_ids(request, self.vocab, self.info, self.tokenize)

    def tokenize(self, text: str, special: bool = True) -> list[int]:
        return self._encode(text, special)

    def _max_new_tokens(self, params: SamplingParams, prompt_len: int) -> int:
        return max_new_tokens(params, prompt_len, self.config.max_model_len)

    def _sequence(
        self,
        stream: GenerationStream,
        index: int,
        prompt_ids: list[int],
        params: SamplingParams,
        max_new: int,
        *,
        seed: int | None = None,
    ) -> Sequence:
        if seed is None:
            seed = params.seed + index if params.seed is not None else secrets.randbits(63)
        decode = self._decode_skip if params.skip_special_tokens else self._decode_all
        return Sequence(
            stream=stream,
            index=index,
            prompt_ids=prompt_ids,
            params=params,
            max_new_tokens=max_new,
            seed=seed,
            tokens=TokenState.create(params, seed, prompt_ids, self.vocab),
            detok=IncrementalDetokenizer(decode, prompt_ids),
            text=StopText(params.stop, params.include_stop_str_in_output),
            grammar=self.grammars.matcher(params.constraint) if params.constraint else None,
        )

    def _wake(self) -> None:
        with self._cond:
            self._cond.notify()

    # -- the engine thread ----------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._cond:
                while not (self._stopping or self._waiting or self._running or self._prefilling):
                    self._cond.wait()
                if self._stopping:
                    break
                admitted = self._admit()
            try:
                self._iteration(admitted)
            except Exception as exc:
                log.exception("the generation step failed; failing the running requests")
                self._fail_all(admitted, exc)
            self._flush()
        with self._cond:
            waiting, self._waiting = list(self._waiting), deque()
        self._fail_all(waiting, ModelError("the model was unloaded"))
        self.prefix_cache.clear()
        self._flush()

    def _admit(self, pending: tuple[Group, ...] = ()) -> list[Group]:
        """Waiting requests that fit in the batch now, beside the running and prefilling ones
        and ``pending`` (admitted, not started yet); called with the lock held."""
        gone = [g for g in self._waiting if g.stream.cancelled]
        if gone:
            self._waiting = deque(g for g in self._waiting if not g.stream.cancelled)
            self._retire([s for g in gone for s in g.seqs])  # the lock is reentrant
        admitted: list[Group] = []
        prefilling = [job.owner for job in self._prefilling] + list(pending)
        room = self.config.max_num_seqs - len(self._running) - sum(len(g.seqs) for g in prefilling)
        kv_room = (self.config.kv_budget_tokens or 2**62) - kv_tokens(self._running)
        kv_room -= sum(g.kv_need for g in prefilling)
        while self._waiting:
            group = self._waiting[0]
            alone = not admitted and not self._running and not prefilling
            if len(group.seqs) > room or (group.kv_need > kv_room and not alone):
                break
            self._clock.served(self._waiting.popleft().tag)
            admitted.append(group)
            room -= len(group.seqs)
            kv_room -= group.kv_need
        self.stats.waiting = len(self._waiting)
        return admitted

    def _iteration(self, admitted: list[Group]) -> None:
        self._drop_cancelled()
        # With no sequence decoding before this iteration (a burst reaching an idle engine),
        # the requests already read by their loops are gathered first, and those arriving during
        # a pass get passes before the first decode step instead of after it. Only newcomers
        # do: a longer prompt's next chunk still waits for the decode step.
        fresh = not self._running
        if fresh:
            self._gather(admitted)
        self._prefill(admitted)
        for _ in range(FRESH_PREFILL_PASSES - 1 if fresh else 0):
            with self._cond:
                more = self._admit()
            if not more:
                break
            admitted += more  # the caller fails them too if a pass fails
            self._prefill(more)
        self._preempt()
        if self._running:
            self._decode()
        held = sum(job.done * len(job.owner.seqs) for job in self._prefilling)
        self.stats.kv_tokens = kv_tokens(self._running) + held
        self.stats.running = len(self._running) + sum(len(j.owner.seqs) for j in self._prefilling)

    def _gather(self, admitted: list[Group]) -> None:
        """Before a burst's first pass: the requests' loops pass on what has arrived (requests
        read in the meantime), which is admitted too, until a round brings nothing new."""
        deadline = time.monotonic() + GATHER_WAIT_S
        for _ in range(GATHER_ROUNDS):
            caught_up({g.stream.loop for g in admitted}, deadline - time.monotonic())
            with self._cond:
                more = self._admit(tuple(admitted))
            if not more:
                return
            admitted += more  # the caller fails them too if a pass fails

    def _prefill(self, admitted: list[Group]) -> None:
        """Start the admitted groups and run one prefill pass; the prompts it finished join."""
        joining: list[tuple[Sequence, KV]] = []
        for group in admitted:
            joining += self._start(group)
        joining += self._prefill_step()
        self._flush()  # the first tokens leave as soon as they are chosen
        self.batch.join([kv for _, kv in joining])
        self._running += [seq for seq, _ in joining]

    def _start(self, group: Group) -> list[tuple[Sequence, KV]]:
        """An admitted group joins now (its cache came along) or starts prefilling."""
        if group.stream.cancelled:
            self._retire(group.seqs)
            return []
        r = group.resume or Resume()
        if r.kv is not None:  # computed elsewhere: catch the text and sampling state up, join
            for seq in group.seqs:
                self._replay(seq, r.prior, None, emit=False)
            return [(s, r.kv) for s in group.seqs]
        keep = len(r.prior) + 1 if r.emit_prior and group.seqs[0].params.logprobs else 1
        self._prefilling.append(PrefillJob(group, group.prompt_ids + r.prior, keep))
        return []

    def _prefill_step(self) -> list[tuple[Sequence, KV]]:
        """One prefill pass; the sequences whose prompt it finished, with their caches."""
        gone = [job for job in self._prefilling if job.owner.stream.cancelled]
        for job in gone:
            self._retire(job.owner.seqs)
        self._prefilling = [job for job in self._prefilling if job not in gone]
        if not self._prefilling:
            return []
        cache = self.prefix_cache
        for job in self._prefilling:
            if not job.started and not job.done:  # what earlier prompts left in the cache
                if job.digests is None:
                    job.digests = cache.digests(job.tokens, len(job.tokens) - job.keep)
                job.done, job.kv = cache.lookup(job.digests)
        chunk = self.config.prefill_chunk_tokens
        budget = chunk * IDLE_PASS_FACTOR
        # streams decoding wait for this pass: long prompts take one chunk of it between them
        chunks = plan(self._prefilling, budget, chunk if self._running else budget)
        for job, _ in chunks:
            if not job.started:
                job.started = True
                self.stats.prefix_hit_tokens += job.done
        results = run(self.runner, chunks)
        self.stats.prefill_steps += 1
        self.stats.prefill_tokens += sum(take for _, take in chunks)
        joining: list[tuple[Sequence, KV]] = []
        for (job, _), logits in zip(chunks, results, strict=True):
            if logits is not None:
                self._prefilling.remove(job)
                joining += self._prefilled(job, logits)
        return joining

    def _prefilled(self, job: PrefillJob, logits: torch.Tensor) -> list[tuple[Sequence, KV]]:
        """A whole prompt is in the cache: choose each sequence's first token; the live ones."""
        group: Group = job.owner
        kv = job.kv
        assert kv is not None  # a finished job holds its whole prompt's cache
        r = group.resume or Resume()
        self.stats.prefills += 1
        self.prefix_cache.insert(job.tokens, kv, len(job.tokens))
        for seq in group.seqs:
            self._replay(seq, r.prior, logits[:-1] if job.keep > 1 else None, r.emit_prior)
        self._advance(group.seqs, logits[-1].unsqueeze(0).expand(len(group.seqs), -1))
        if r.handoff is not None:  # a prefill instance: the cache leaves instead of decoding on
            seq = group.seqs[0]
            r.handoff.kv, r.handoff.seed = kv, seq.seed
            r.handoff.sampler_state = generator_state(seq.tokens.generator)
            self._retire(group.seqs)
            return []
        live = [s for s in group.seqs if not s.finished]
        self._retire([s for s in group.seqs if s.finished])
        return [(s, kv) for s in live]

    def _replay(self, seq: Sequence, prior: list[int], logits: Any, emit: bool) -> None:
        """Accept tokens chosen before (elsewhere) as if they had just been chosen here."""
        for i, token in enumerate(prior):
            if seq.grammar is not None and not seq.grammar.accept(token):
                log.warning("a token made before does not follow the request's grammar")
            want: list[int | None] = [seq.params.top_logprobs]
            lp = logprobs(logits[i : i + 1], [token], want)[0] if logits is not None else None
            delta = self.deltas.accept(seq, token, lp)
            if emit:
                self._send(seq, delta)

    def _preempt(self) -> None:
        """Drop preemptible sequences, newest first, while the running ones outgrow the budget."""
        budget = self.config.kv_budget_tokens
        if not budget or len(self._running) < 2:
            return
        usages = [kv_usage(len(s.prompt_ids), len(s.output_ids)) for s in self._running]
        drop = victims(usages, [s.preemptible for s in self._running], budget)
        if not drop:
            return
        gone = [self._running[i] for i in drop]
        for seq in gone:
            state = generator_state(seq.tokens.generator)
            self._send(seq, Preempted(seq.prompt_ids, seq.output_ids, seq.seed, state))
        self.stats.preempted += len(gone)
        self._retire(gone)
        keep = [i for i in range(len(self._running)) if i not in drop]
        self.batch.keep(keep)
        self._running = [self._running[i] for i in keep]

    def _decode(self) -> None:
        logits = self.batch.step([s.last_token for s in self._running])
        self.stats.decode_steps += 1
        self.stats.peak_batch = max(self.stats.peak_batch, len(self._running))
        self._advance(self._running, logits)
        keep = [i for i, s in enumerate(self._running) if not s.finished]
        self._retire([s for s in self._running if s.finished])
        self.batch.keep(keep)
        self._running = [self._running[i] for i in keep]

    def _drop_cancelled(self) -> None:
        keep = [i for i, s in enumerate(self._running) if not s.stream.cancelled]
        if len(keep) < len(self._running):
            gone = [s for s in self._running if s.stream.cancelled]
            self.stats.cancelled += len(gone)
            self._retire(gone)
            self.batch.keep(keep)
            self._running = [self._running[i] for i in keep]

    def _retire(self, seqs: list[Sequence]) -> None:
        fresh = [s for s in seqs if not s.retired]
        for seq in fresh:
            seq.retired = True
        if fresh:
            with self._cond:
                self.capacity.give_back(fresh)

    def _advance(self, seqs: list[Sequence], logits: torch.Tensor) -> None:
        """Choose each sequence's next token and send what it produced."""
        matchers = [s.grammar for s in seqs]
        # (logits: the constrained rows masked, as vLLM's logprobs are)
        tokens, failed, logits = self.grammars.choose(logits, [s.tokens for s in seqs], matchers)
        self.stats.tokens += len(tokens) - len(failed)
        want = [s.params.top_logprobs if s.params.logprobs else None for s in seqs]
        lps = logprobs(logits, tokens, want)
        gone = self._fail_rows(seqs, failed) if failed else frozenset()
        for seq, token, lp in zip(seqs, tokens, lps, strict=True):
            if seq.stream not in gone:
                self._send(seq, self.deltas.accept(seq, token, lp))

    def _fail_rows(
        self, seqs: list[Sequence], failed: dict[int, Exception]
    ) -> frozenset[GenerationStream]:
        """The requests of the rows whose sampling failed end with an error, all their
        sequences finished; the rest of the batch goes on as if they had never been there."""
        errors: dict[GenerationStream, Exception] = {}
        for row, exc in failed.items():
            errors.setdefault(seqs[row].stream, exc)
        for stream, exc in errors.items():
            log.warning("sampling failed for one request; it ends, its batch goes on: %r", exc)
            error = ModelError(f"sampling failed: {type(exc).__name__}: {str(exc)[:200]}")
            self._outbox[stream.loop].append((stream, error))
        for seq in seqs:
            if seq.stream in errors:
                seq.finished = True
        return frozenset(errors)

    # -- handing results to the event loops -----------------------------------------------------

    def _send(self, seq: Sequence, item: Item) -> None:
        self._outbox[seq.stream.loop].append((seq.stream, item))

    def _flush(self) -> None:
        outbox, self._outbox = self._outbox, defaultdict(list)
        hand_over(outbox)

    def _fail_all(self, groups: list[Group], exc: Exception) -> None:
        """Every running sequence and every sequence of ``groups`` ends with ``exc``."""
        error = exc if isinstance(exc, ServingError) else ModelError(f"{type(exc).__name__}: {exc}")
        groups = groups + [job.owner for job in self._prefilling]
        self._prefilling = []
        seqs = list(dict.fromkeys(self._running + [s for g in groups for s in g.seqs]))
        seqs = [s for s in seqs if not s.retired]
        for stream in {s.stream for s in seqs}:
            self._outbox[stream.loop].append((stream, error))
        self._retire(seqs)
        self._running = []
        self.batch.clear()
