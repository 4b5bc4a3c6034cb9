//! SRv6: the Segment Routing Header (RFC 8754) and uSID containers (RFC 9800).
