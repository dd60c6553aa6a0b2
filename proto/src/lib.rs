//! Wire contracts of kruntimes: the protobuf services (`FunctionRuntime`,
//! `SessionRuntime`, `RuntimeServer`, `OwnershipTable`), the public HTTP error shape and header names shared by
//! the gateway and runtimed, and the ownership watch protocol's publisher and
//! consumer, which every component speaks the same way.
#![forbid(unsafe_code)]

pub mod api;
pub mod watch;

/// `kruntimes.function.v1`: the control plane's registration interface to
/// runtimed.
pub mod function {
    /// Version 1 of the FunctionRuntime contract.
    pub mod v1 {
        #![allow(missing_docs, clippy::all)]
        tonic::include_proto!("kruntimes.function.v1");
    }
}

/// `kruntimes.session.v1`: session lifecycle on a Runtime Server.
pub mod session {
    /// Version 1 of the SessionRuntime contract.
    pub mod v1 {
        #![allow(missing_docs, clippy::all)]
        tonic::include_proto!("kruntimes.session.v1");
    }
}

/// `kruntimes.runtime.v1`: the Runtime Server contract between runtimed and
/// the process that runs user code.
pub mod runtime {
    /// Version 1 of the RuntimeServer contract.
    pub mod v1 {
        #![allow(missing_docs, clippy::all)]
        tonic::include_proto!("kruntimes.runtime.v1");
    }

    pub mod lease;
    pub mod path;
    pub mod worker;

    /// Largest message on the Runtime Server socket: a 32 MiB file plus
    /// framing.
    pub const MAX_MESSAGE_BYTES: usize = 40 * 1024 * 1024;

    /// A client of the Runtime Server on the Unix socket `path`, with the
    /// contract's message limits. The channel connects lazily and again
    /// after the server restarts; calls fail with UNAVAILABLE meanwhile.
    pub fn client(
        path: impl Into<std::path::PathBuf>,
    ) -> v1::runtime_server_client::RuntimeServerClient<tonic::transport::Channel> {
        let path = path.into();
        // The URI is required by the API and never dialled: the connector
        // below opens the socket.
        let channel = tonic::transport::Endpoint::from_static("http://runtime-server.invalid")
            .connect_timeout(std::time::Duration::from_secs(2))
            .connect_with_connector_lazy(tower::service_fn(move |_: tonic::transport::Uri| {
                let path = path.clone();
                async move {
                    let stream = tokio::net::UnixStream::connect(path).await?;
                    Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(stream))
                }
            }));
        v1::runtime_server_client::RuntimeServerClient::new(channel)
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES)
    }
}

/// `kruntimes.ownership.v1`: the ownership table watch.
pub mod ownership {
    /// Version 1 of the OwnershipTable watch.
    pub mod v1 {
        #![allow(missing_docs, clippy::all)]
        tonic::include_proto!("kruntimes.ownership.v1");
    }
}
