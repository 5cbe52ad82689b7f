"""Every etcd key and value of meshhealth: the key layout (keys.py) and one codec per
value (node, retained, ip_entry, cluster_config, health, claim, summary), validated by
the field declarations of fields.py inside the msgpack envelope of envelope.py.
Pure, no I/O; docs/kvstore.md is the contract.
"""
