"""playground/remote/prometheus.py: a scrape read with vLLM's names, counters across restarts."""

import pytest

from playground.remote.prometheus import finished_grown, grown, increments, parse_metrics

# From vLLM 0.32's /metrics (CPU build, one engine), trimmed; two engines for the sums.
VLLM_TEXT = """
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="smol"} 3.0
vllm:num_requests_running{engine="1",model_name="smol"} 2.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="smol"} 4.0
# TYPE vllm:num_requests_waiting_by_reason gauge
vllm:num_requests_waiting_by_reason{engine="0",model_name="smol",reason="capacity"} 3.0
vllm:num_requests_waiting_by_reason{engine="0",model_name="smol",reason="deferred"} 1.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="smol"} 0.5
vllm:kv_cache_usage_perc{engine="1",model_name="smol"} 0.25
# TYPE vllm:prefix_cache_queries counter
vllm:prefix_cache_queries_total{engine="0",model_name="smol"} 74.0
vllm:prefix_cache_queries_created{engine="0",model_name="smol"} 1.79e+09
# TYPE vllm:prefix_cache_hits counter
vllm:prefix_cache_hits_total{engine="0",model_name="smol"} 32.0
# TYPE vllm:num_preemptions counter
vllm:num_preemptions_total{engine="0",model_name="smol"} 2.0
# TYPE vllm:generation_tokens counter
vllm:generation_tokens_total{engine="0",model_name="smol"} 36.0
# TYPE vllm:request_success counter
vllm:request_success_total{engine="0",finished_reason="stop",model_name="smol"} 1.0
vllm:request_success_total{engine="0",finished_reason="length",model_name="smol"} 4.0
vllm:request_success_total{engine="0",finished_reason="abort",model_name="smol"} 0.0
# TYPE vllm:iteration_tokens_total histogram
vllm:iteration_tokens_total_bucket{engine="0",le="1.0",model_name="smol"} 10.0
vllm:iteration_tokens_total_bucket{engine="0",le="+Inf",model_name="smol"} 29.0
vllm:iteration_tokens_total_count{engine="0",model_name="smol"} 29.0
vllm:iteration_tokens_total_sum{engine="0",model_name="smol"} 110.0
"""


def test_a_vllm_scrape_summed_over_engines():
    m = parse_metrics(VLLM_TEXT, t=5.0)
    assert (m.t, m.running, m.waiting) == (5.0, 5.0, 4.0)
    assert m.waiting_by_reason == {"capacity": 3.0, "deferred": 1.0}
    assert m.kv_usage == pytest.approx(0.375)  # the engines' mean
    assert (m.prefix_queries, m.prefix_hits, m.preemptions) == (74.0, 32.0, 2.0)
    assert (m.generation_tokens, m.iteration_tokens, m.iterations) == (36.0, 110.0, 29.0)
    assert m.prompt_tokens is None  # not in this text: None, not 0
    assert m.finished == {"stop": 1.0, "length": 4.0, "abort": 0.0}


def test_this_projects_stop_reasons_read_as_vllms():
    text = "\n".join(
        f'vllm:request_success_total{{finished_reason="{r}",model_name="m"}} {n}'
        for r, n in (("eos", 2), ("stop_word", 1), ("max_tokens", 3), ("cancelled", 1),
                     ("error", 1))
    )  # fmt: skip
    assert parse_metrics(text, 0.0).finished == {"stop": 3, "length": 3, "abort": 1, "error": 1}


def test_not_prometheus_text_is_a_value_error():
    with pytest.raises(ValueError):
        parse_metrics("<html>a login page</html>\n", 0.0)


def test_counters_grow_across_a_server_restart():
    samples = [parse_metrics(f"vllm:num_preemptions_total {v}\n", float(i))
               for i, v in enumerate([5, 7, 7, 1, 4])]  # fmt: skip
    assert increments(samples, "preemptions") == [0.0, 2.0, 0.0, 1.0, 3.0]  # restart: 7 -> 1
    assert grown(samples, "preemptions") == 6.0
    assert grown(samples, "prefix_hits") is None  # not exported


def test_finished_requests_grow_by_reason():
    def scrape(stop, length):
        return parse_metrics(
            f'vllm:request_success_total{{finished_reason="stop"}} {stop}\n'
            f'vllm:request_success_total{{finished_reason="length"}} {length}\n',
            0.0,
        )

    samples = [scrape(10, 1), scrape(12, 1), scrape(1, 0), scrape(2, 3)]  # a restart after 2
    assert finished_grown(samples) == {"stop": 4.0, "length": 3.0}
