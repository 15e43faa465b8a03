"""A KV connector over TCP for real engines (vLLM loads it by module path).

``wire`` (framing, messages, block keys: stdlib only), ``store`` (the receiving side's
blocks and transfers), ``node`` (the sockets: the listener every instance runs beside its
KV cache, and the pooled, DSCP-marked sender), ``connector`` (vLLM's ``KVConnectorBase_V1``
over them; the only module that imports torch or vLLM). Nothing here runs at import.
"""
