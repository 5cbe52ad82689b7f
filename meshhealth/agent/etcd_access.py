"""The agent's etcd: endpoints, TLS files and user from its options (and the
--etcd-config file), as the EtcdAccess the kvstore layer opens."""

from __future__ import annotations

import logging

from meshhealth.agent.config.agent_config import AgentConfig
from meshhealth.kvstore.etcd_config import (
    EtcdAccess,
    EtcdAuth,
    TlsFiles,
    clear_text_password_warning,
    etcd_access,
    read_etcd_config_file,
)

log = logging.getLogger("meshhealth.agent")


def agent_etcd_access(config: AgentConfig) -> EtcdAccess:
    """EtcdConfigError (one line) when the options do not fit together or the etcd
    configuration file cannot be read. The TLS files themselves are read when etcd
    is opened (and again when they change): a bad one leaves etcd down, with the
    reason, but the agent running."""
    file_config = read_etcd_config_file(config.etcd_config) if config.etcd_config else None
    auth = None
    if config.etcd_user is not None:
        auth = EtcdAuth(
            config.etcd_user,
            password_file=config.etcd_password_file,
            password=config.etcd_password,
        )
    access = etcd_access(
        list(config.etcd) or None,
        config=file_config,
        tls=TlsFiles(config.etcd_ca, config.etcd_cert, config.etcd_key),
        auth=auth,
    )
    warning = clear_text_password_warning(access)
    if warning is not None:
        log.warning("%s", warning)
    return access
