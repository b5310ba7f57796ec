//! What a newcomer sees when the URL or the server is wrong: the URL's fault and the form
//! expected, a refused connection named as such (not the pool's wording), and a server that
//! answers in another protocol (an HTTP server on the port) said to be one. Real sockets: a
//! port nobody listens on, and a tiny TCP listener that answers HTTP.

use std::time::Duration;

use lock_core::{LockError, Locker};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

const TTL: Duration = Duration::from_secs(5);

fn config_text(url: &str) -> String {
    match Locker::from_url(url) {
        Err(err @ LockError::Config(_)) => err.to_string(),
        Err(other) => panic!("{url}: expected a Config error, got {other:?}"),
        Ok(_) => panic!("{url}: accepted"),
    }
}

#[test]
fn a_url_of_another_scheme_says_which_and_what_form_is_expected() {
    let text = config_text("http://127.0.0.1:6379/");
    assert!(text.contains("`http`"), "{text}");
    assert!(text.contains("host:port/db"), "{text}");
    assert!(!text.contains("InvalidClientConfig"), "{text}");

    let text = config_text("127.0.0.1:6379");
    assert!(text.contains("no scheme"), "{text}");
    assert!(
        text.contains("redis://127.0.0.1:6379/"),
        "suggests the fix: {text}"
    );
    assert!(!text.contains("InvalidClientConfig"), "{text}");

    let text = config_text("redis://u:s3cret@/0");
    assert!(text.contains("host:port/db"), "{text}");
    assert!(!text.contains("s3cret"), "{text}");
}

/// A free port: bound, then closed, so that connecting to it is refused.
fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("addr").port()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_connection_says_so_and_where() {
    let port = closed_port();
    let locker =
        Locker::from_url(&format!("redis://app:s3cret@127.0.0.1:{port}/")).expect("locker");
    let err = locker.try_lock("job", TTL).await.unwrap_err();
    assert!(matches!(err, LockError::Connection { .. }), "{err:?}");
    let text = err.to_string();
    eprintln!("{text}");
    assert!(
        !text.contains("Error occurred while creating a new object"),
        "the pool's wording: {text}"
    );
    assert!(text.contains("refused"), "{text}");
    assert!(
        text.contains(&format!("redis://***@127.0.0.1:{port}/")),
        "names the (redacted) URL: {text}"
    );
    assert!(!text.contains("s3cret"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_speaking_http_is_named_as_such() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let server = tokio::spawn(async move {
        loop {
            let Ok((mut socket, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let mut buffer = [0u8; 1024];
                let _ = socket.read(&mut buffer).await;
                let _ = socket
                    .write_all(
                        b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\nContent-Length: 11\r\nConnection: close\r\n\r\nBad Request",
                    )
                    .await;
                let _ = socket.shutdown().await;
            });
        }
    });
    let locker = Locker::builder()
        .url(format!("redis://127.0.0.1:{port}/"))
        .command_timeout(Duration::from_secs(2))
        .build()
        .expect("locker");
    let err = locker.try_lock("job", TTL).await.unwrap_err();
    server.abort();
    let text = err.to_string();
    eprintln!("{text}");
    assert!(matches!(err, LockError::Connection { .. }), "{err:?}");
    assert!(
        !text.contains("Error occurred while creating a new object"),
        "the pool's wording: {text}"
    );
    assert!(text.contains("does not speak the Redis protocol"), "{text}");
    assert!(text.contains("HTTP"), "{text}");
    assert!(
        text.contains(&format!("redis://127.0.0.1:{port}/")),
        "{text}"
    );
}
