# Run by perl (perl-base is in every Debian image) as root in the sandbox,
# with arguments NAME=SOCKET[=PORT]...: for each, listens on an ephemeral
# port (or PORT) of the container's 127.0.0.1 and relays every connection
# to the host's Unix socket SOCKET (mounted read-only). It prints "NAME
# PORT" per argument once every socket answered, then detaches, so the
# exec that started it returns with the relays ready. The sandbox has no
# network: these relays are its only way to the host's model and egress
# proxies. The daemon and its per-connection children are called
# sa-forward; the keepalive watchdog does not count them as activity.
#
# PORT is given when a new host adopts the sandbox: its CLI is configured
# with that port. The relay started for the dead host outlives it (it
# connects to SOCKET afresh for every connection), so a PORT that a
# listener of this uid holds is that relay's, and is left to it; a
# listener of another uid (the sandbox's user squatting on a dead relay's
# port) is refused.
use strict;
use warnings;
use IO::Socket::INET;
use IO::Socket::UNIX;
use IO::Select;
use POSIX qw(setsid);
use Socket qw(SOCK_STREAM IPPROTO_TCP TCP_NODELAY);

# listener_uid is the uid owning the TCP listener on 127.0.0.1:PORT
# (/proc/net/tcp: local address in hex, state 0A = LISTEN, uid column 8).
sub listener_uid {
    my ($port) = @_;
    my $want = sprintf '0100007F:%04X', $port;
    open my $f, '<', '/proc/net/tcp' or return;
    while (<$f>) {
        my @c = split;
        return $c[7] if @c > 7 && $c[1] eq $want && $c[3] eq '0A';
    }
    return;
}

my (@listen, %path);
for my $arg (@ARGV) {
    my ($name, $sock, $want) = split /=/, $arg, 3;
    die "bad argument $arg\n"
        unless defined $sock && $name =~ /^[a-z]+$/ && (!defined $want || $want =~ /^[1-9][0-9]{0,4}$/);
    my $probe = IO::Socket::UNIX->new(Type => SOCK_STREAM, Peer => $sock)
        or die "cannot reach the host's $name socket $sock: $!\n";
    close $probe;
    my $l = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => $want || 0, Listen => 128, Proto => 'tcp', ReuseAddr => 1);
    if (!$l && $want && $!{EADDRINUSE}) {
        my $uid = listener_uid($want);
        die "port $want for $name is held by uid ", $uid // '?', ", not by the relay\n"
            unless defined $uid && $uid == $>;
        print "$name $want\n";
        next;
    }
    $l or die "listen for $name: $!\n";
    print "$name ", $l->sockport, "\n";
    push @listen, $l;
    $path{fileno $l} = $sock;
}
STDOUT->flush;
exit 0 unless @listen;
defined(my $pid = fork) or die "fork: $!\n";
exit 0 if $pid;
setsid();
open STDIN, '<', '/dev/null';
open STDOUT, '>', '/dev/null';
open STDERR, '>', '/dev/null';
$0 = 'sa-forward';
$SIG{CHLD} = 'IGNORE';
my $sel = IO::Select->new(@listen);
while (1) {
    for my $l ($sel->can_read) {
        my $c = $l->accept or next;
        # Without it Nagle holds a stream's last small write until the
        # client's delayed ACK: 40 ms at the end of every answer.
        setsockopt($c, IPPROTO_TCP, TCP_NODELAY, 1);
        my $sock = $path{fileno $l};
        my $child = fork;
        if (!defined $child || $child) { close $c; next; }
        close $_ for @listen;
        my $u = IO::Socket::UNIX->new(Type => SOCK_STREAM, Peer => $sock) or exit 1;
        relay($c, $u);
        exit 0;
    }
}

# relay copies both ways until both directions reached end of file.
sub relay {
    my ($x, $y) = @_;
    my %peer = (fileno($x) => $y, fileno($y) => $x);
    my $s = IO::Select->new($x, $y);
    my $buf;
    while ($s->count) {
        for my $h ($s->can_read) {
            my $n = sysread($h, $buf, 65536);
            my $o = $peer{fileno $h};
            if (!$n) {
                $s->remove($h);
                shutdown($o, 1);
                next;
            }
            my $off = 0;
            while ($off < $n) {
                my $w = syswrite($o, $buf, $n - $off, $off);
                return unless defined $w;
                $off += $w;
            }
        }
    }
}
