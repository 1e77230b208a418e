# Run by perl (perl-base is in every Debian image) as root in the sandbox,
# with arguments NAME=SOCKET...: for each, listens on an ephemeral port of
# the container's 127.0.0.1 and relays every connection to the host's
# Unix socket SOCKET (mounted read-only). It prints "NAME PORT" per
# argument once every socket answered, then detaches, so the exec that
# started it returns with the relays ready. The sandbox has no network:
# these relays are its only way to the host's model and egress proxies.
# The daemon and its per-connection children are called sa-forward; the
# keepalive watchdog does not count them as activity.
use strict;
use warnings;
use IO::Socket::INET;
use IO::Socket::UNIX;
use IO::Select;
use POSIX qw(setsid);
use Socket qw(SOCK_STREAM IPPROTO_TCP TCP_NODELAY);

my (@listen, %path);
for my $arg (@ARGV) {
    my ($name, $sock) = split /=/, $arg, 2;
    die "bad argument $arg\n" unless defined $sock && $name =~ /^[a-z]+$/;
    my $probe = IO::Socket::UNIX->new(Type => SOCK_STREAM, Peer => $sock)
        or die "cannot reach the host's $name socket $sock: $!\n";
    close $probe;
    my $l = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => 0, Listen => 128, Proto => 'tcp')
        or die "listen for $name: $!\n";
    print "$name ", $l->sockport, "\n";
    push @listen, $l;
    $path{fileno $l} = $sock;
}
STDOUT->flush;
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
