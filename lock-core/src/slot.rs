//! Redis Cluster's key slots: which slot a key lies in (the hash-tag rule), for the
//! replica check's per-slot routing and the key layout's tests.

/// The number of key slots of a Redis Cluster.
pub(crate) const CLUSTER_SLOTS: u16 = 16_384;

/// CRC16/XMODEM (polynomial 0x1021, initial value 0), the checksum of Redis Cluster's key
/// slots.
fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in bytes {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 == 0 {
                crc << 1
            } else {
                (crc << 1) ^ 0x1021
            };
        }
    }
    crc
}

/// Redis Cluster's slot of `key`: the CRC16 of what lies between the first `{` and the
/// first `}` after it, if that is not empty; else of the whole key.
pub(crate) fn cluster_slot(key: &[u8]) -> u16 {
    let tagged = key.iter().position(|&b| b == b'{').and_then(|open| {
        let rest = &key[open + 1..];
        let close = rest.iter().position(|&b| b == b'}')?;
        (close > 0).then(|| &rest[..close])
    });
    crc16(tagged.unwrap_or(key)) % CLUSTER_SLOTS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc16_and_slot_match_redis() {
        // The examples of the Redis Cluster specification and known slots.
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(cluster_slot(b"foo"), 12182);
        assert_eq!(
            cluster_slot(b"{user1000}.following"),
            cluster_slot(b"{user1000}.followers")
        );
        assert_eq!(cluster_slot(b"foo{}{bar}"), crc16(b"foo{}{bar}") % 16384);
        assert_eq!(cluster_slot(b"foo{{bar}}zap"), crc16(b"{bar") % 16384);
        assert_eq!(cluster_slot(b"foo{bar}{zap}"), crc16(b"bar") % 16384);
    }
}
