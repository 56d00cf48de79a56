"""A measurement client for OpenAI-compatible streaming servers (llama.cpp, vLLM, SGLang).

Chapter 8's protocol, run against a server over HTTP instead of the book's in-process
decoder (:mod:`specdec.protocol`). From the command line::

    python -m specdec.client --endpoint http://127.0.0.1:8080 --concurrency 1,2,4
    python -m specdec.client --endpoint URL --rate 2,4,8 --burstiness 0.5 --ttft-max 0.5
    python -m specdec.client --endpoint SPEC_URL --baseline BASE_URL --repeats 3
    python -m specdec.client --endpoint URL --exactness reported --temperature 1
    python -m specdec.client --endpoint SPEC_URL --exactness model --target target \
        --draft draft --baseline BASE_URL --temperature 1

Modules, by idea:

- :mod:`specdec.client.stream`: one streamed request (SSE over ``/v1/completions`` or
  ``/v1/chat/completions`` with :mod:`httpx`), its time stamps and latencies (TTFT,
  inter-chunk latency, per-token latency, TPOT, end-to-end), tokens from ``usage``;
  :class:`ClientError` names the failing request.
- :mod:`specdec.client.load`: closed-loop concurrency, open-loop arrivals (Poisson or
  gamma), goodput under TTFT/TPOT limits, server-reported acceptance, prompt lengths in
  server tokens, and the paired, interleaved baseline-versus-speculative protocol; a run
  that fails raises :class:`RunFailed` with what it measured before the failure.
- :mod:`specdec.client.tokencheck`: the served engine's law, black box, token by token:
  every emitted token against the law of its position (:mod:`specdec.stats.pertoken`; laws
  computed by the book's models, or the server's reported top log-probabilities with the
  rest pooled).
- :mod:`specdec.client.exactness`: the assumption-free cross-check: seeded draws of the
  first tokens after a prompt against the exact law (calibrated, :mod:`specdec.stats`),
  or, without an exact law, against the same server without speculation (two samples).
- :mod:`specdec.client.__main__`: the command line, JSON results, progress bar.

Acceptance the servers report
-----------------------------
- **llama.cpp** (``llama-server``): the final event of a stream carries ``timings`` with
  ``draft_n`` (drafted tokens) and ``draft_n_accepted`` when a draft is loaded and used;
  with ``timings_per_token`` every event carries cumulative ``predicted_n``. Read per
  request; :func:`specdec.client.load.acceptance` sums them.
- **vLLM**: Prometheus counters at ``/metrics``: ``vllm:spec_decode_num_drafts_total``,
  ``vllm:spec_decode_num_draft_tokens_total``, ``vllm:spec_decode_num_accepted_tokens_total``
  and ``vllm:spec_decode_num_accepted_tokens_per_pos`` (server-wide: read them before and
  after a run and take differences); recent versions also return per-request
  ``metrics.speculative_decoding`` with ``--per-request-spec-decode-metrics summary``.
- **SGLang**: ``avg_spec_accept_length`` in ``/get_server_info`` (server-cumulative), and
  ``meta_info.spec_verify_ct`` (verification passes) per request of its native
  ``/generate`` API; accepted length = completion tokens / ``spec_verify_ct``.
Field names change between versions: check the version you run.

Results file (one JSON object per run; ``"schema": "specdec.client/1"``)
--------------------------------------------------------------------------
``schema``; ``command`` (argv); ``endpoint`` {url, api, model}; ``baseline`` (url or
null); ``sampling`` (the request fields); ``max_tokens``; ``seed``; ``complete`` (false
when a request failed or Ctrl-C stopped the run: the file then holds every request
measured before it) and ``failure`` (null, or {request, error, time_utc, clock, and where:
setting, load, after (s into the run), repeat, language}); ``prompt_lengths``
(per language: prompts, characters, bytes and server tokens as {min, median, max});
``runs``: a list, one per load point, each with ``setting``, ``load`` ({kind: closed,
concurrency} or {kind: open, rate, burstiness}), ``requests``, ``wall`` (s),
``completion_tokens``, ``output_throughput`` (tokens/s), ``request_throughput``,
``goodput`` (requests/s within ``ttft_max`` and ``tpot_max``, s), ``ttft``, ``tpot``,
``itl``, ``token_latency``, ``e2e`` (each {p50, p90, p99, mean}, seconds), ``draft_n``,
``draft_n_accepted``, ``acceptance``, ``complete``, and ``records``: per request ``id``, ``language``,
``start``, ``chunk_times``, ``chunk_texts``, ``chunk_tokens``, ``end``,
``completion_tokens``, ``prompt_tokens``, ``timings``, ``finish_reason``, ``ttft``,
``e2e``, ``tpot``; with ``--baseline``, ``paired``: the output of
:func:`specdec.client.load.paired` (``rows`` with paired ``speedup``, its quartiles
``speedup_q1`` and ``speedup_q3``, and ``speedup_iqr``).
Times are the client's :func:`time.perf_counter` in seconds.

With ``--exactness``, the file holds ``schema``, ``command``, ``endpoint``, with
``--exactness model`` and no ``--tolerance`` ``disagreement`` (:func:`specdec.client.
tokencheck.engine_disagreement`: ``positions``, ``max_tv``, ``median_tv``, ``max_abs``), and
``exactness``: the fields of :class:`specdec.stats.pertoken.PerTokenCheck` (``passed``,
``pvalue``, ``pvalues``, ``adjusted`` and ``means`` per ordering, ``tokens``,
``positions``, ``requests``, ``impossible``, ``false_alarm``, ``power``, ``tolerance``,
``detectable_tv``, ``message``) and ``extra`` (``laws``, ``settings``, ``request_fields``,
``max_tokens``, ``seed``, ``requests_seconds``, ``seconds``, and per mode ``target``,
``draft`` or ``top_logprobs``, ``tokens_in_pooled_cell``).

Used in Chapter 8.
"""

from specdec.client.load import (Run, RunFailed, acceptance, arrival_times, closed_loop, failure_record,
                   goodput, open_loop, paired, prompt_lengths, summarize_run, tokenize)
from specdec.client.stream import (ClientError, Endpoint, RequestRecord, RequestSpec, plain_sampling,
                     stream_request)

SCHEMA = "specdec.client/1"

__all__ = ["SCHEMA", "ClientError", "Endpoint", "RequestSpec", "RequestRecord",
           "plain_sampling", "stream_request", "arrival_times", "Run", "RunFailed",
           "failure_record", "closed_loop",
           "open_loop", "goodput", "summarize_run", "acceptance", "tokenize",
           "prompt_lengths", "paired"]
