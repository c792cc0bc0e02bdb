/*
Package clientip resolves the client address of an HTTP request and turns it
into a quota bucket that a client cannot choose for itself.

Build one [Resolver] per policy with [New] and call [Resolver.Key] for the
bucket of a request, or [Resolver.Addr] for the address behind it. A
Resolver is safe for concurrent use and allocates nothing to resolve the
address of a well-formed request; [Resolver.AppendKey] writes the bucket
into a buffer of the caller's, allocating nothing either. [Canonical]
turns any address into a bucket without a request.

# The socket peer by default

By default the client is the socket peer: the host part of
http.Request.RemoteAddr, which net/http fills in from the connection
("192.0.2.1:52100", "[2001:db8::1]:443"; a bare address is accepted too).
Nothing the client sends can change it, so this is the right choice for a
service that clients reach directly.

A request whose RemoteAddr is empty, does not parse or is an unspecified
address (0.0.0.0, ::, which no real peer has) has no known client:
[Resolver.Addr] reports false and [Resolver.Key] returns [Unknown], a bucket
every such request shares, so that they share one quota rather than escape
it. The first such request logs a warning through [Config.Logger], once per
Resolver; it usually means that a host mounting the handler does not pass
the peer address on. The warning never includes the offending value. The
same holds when a trusted proxy forwards an unspecified address as the
client (below). This is the line client.SourceBucket draws for the
fairness buckets of a Sluice server's admission.

# Trusted proxies

Behind proxies or load balancers the socket peer is the last proxy, and the
client is found in a forwarding header ([Config.Header], X-Forwarded-For by
default). The header is honoured only through [Config.TrustProxy], a
predicate saying which hops may be trusted to have written it; [TrustCIDRs]
builds one from a list of networks. The walk is:

 1. If the socket peer is not trusted, it is the client and the header is
    ignored. A client that reaches the service directly therefore cannot
    choose its key by sending the header itself.
 2. Otherwise the header's addresses are read from right to left, the
    nearest hop first. The first one that is not trusted is the client:
    everything to its left was written by that untrusted hop, so a spoofed
    leftmost value is never reached.
 3. If every hop is trusted, the leftmost address is the client.

This holds only if every trusted proxy appends the address of its own peer
to the header (or overwrites it), and if untrusted hosts cannot reach the
service around the proxies; restrict direct access as the deployment needs.

The header is an X-Forwarded-For list: addresses separated by commas, each
optionally with a port ("192.0.2.1:8080", "[2001:db8::1]:443", and
"[2001:db8::1]"), which is dropped, and with spaces or tabs around it. An
IPv6 address with a port must be bracketed: "2001:db8::1:443" is read as the
address 2001:db8::1:443. Several header lines are one list: they are joined
in order, each separated from the next by a comma and a space, as RFC 9110
(section 5.3) allows, so the last line holds the nearest hop.

The header is ignored, and the socket peer is the client, when the chain is
malformed: an element that is not an address (a host name, "unknown", an
IPv4 address with zero-padded octets, an invalid port) or an empty element;
when it holds more than [MaxHops] addresses; or when the joined value is
longer than [MaxHeaderLen] characters. The whole chain is checked before any
hop is trusted, and these bounds keep the cost of a hostile header small.
An absent or blank header also leaves the socket peer as the client: a
trusted proxy that forwards nothing is itself the client.

# Buckets

[Resolver.Key] and [Canonical] map an address to a bucket:

  - An unspecified address (0.0.0.0, ::, mapped or with a zone) is
    [Unknown], shared with requests that have no peer at all.
  - An IPv4 address is its own bucket, in dotted form ("192.0.2.1"),
    whatever the IPv6 prefix length.
  - An IPv4-mapped IPv6 address (::ffff:0:0/96, as written by dual-stack
    listeners and some proxies) becomes the IPv4 address it carries before
    anything else, so "::ffff:192.0.2.1" and "::ffff:c000:201" share the
    bucket of 192.0.2.1 and never the bucket of another IPv4 client.
  - An IPv6 address is grouped by its prefix of [Config.IPv6Prefix] bits
    (/64 by default) and written as that prefix in canonical form
    ("2001:db8:1:2::/64"), so that uppercase or zero-padded spellings of one
    address, and the addresses a host rotates through inside its /64, share
    one bucket rather than each drawing a fresh quota. /128 keeps every IPv6
    host apart; /0 puts every IPv6 client in one bucket.
  - A scope (zone) stays part of the bucket, in the form of RFC 4007
    (section 11.7): fe80::1%eth0 and fe80::1%eth1 are "fe80::%eth0/64" and
    "fe80::%eth1/64".

Grouping can throttle several clients who share one IPv6 network; choose a
prefix that suits the deployment. It reduces churn within a network but
does not stop exhaustion by clients from many networks.

A bucket names a raw address: hash it with a keyed hash before it reaches a
store, a log or a metric, as every other raw identifier in Sluice.
*/
package clientip
