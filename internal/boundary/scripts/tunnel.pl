# Run by perl in the sandbox, with arguments NAME[=PORT]...: the relay to
# the host's proxies for engines that cannot mount the host's sockets
# (Kubernetes). For each NAME it listens on an ephemeral port of the
# container's 127.0.0.1, or on PORT (a host adopting the sandbox: its CLI
# is configured with that port; the dead host's tunnel may hold it for a
# moment, until its stdin closes), and prints "NAME PORT"; then every
# connection is carried over this process's stdin and stdout, which the
# host holds (the exec that started it), as frames:
#   type (1 byte) | connection id (4 bytes, big-endian) | length (4) | data
# O: opened (data: NAME), D: data, C: no more data this way (half-close),
# R: reset. It runs until stdin closes. Named sa-forward, so the
# keepalive watchdog does not count it as activity.
use strict;
use warnings;
use IO::Socket::INET;
use IO::Select;
use Socket qw(IPPROTO_TCP TCP_NODELAY);

$0 = 'sa-forward';
$SIG{PIPE} = 'IGNORE';
my (%svc, %conn, %rdone, %wdone);
my $sel = IO::Select->new;
for my $arg (@ARGV) {
    my ($name, $want) = split /=/, $arg, 2;
    die "bad argument $arg\n" unless $name =~ /^[a-z]+$/ && (!defined $want || $want =~ /^[1-9][0-9]{0,4}$/);
    my $l;
    for my $try (1 .. ($want ? 50 : 1)) {
        $l = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => $want || 0, Listen => 128, Proto => 'tcp', ReuseAddr => 1)
            and last;
        last unless $!{EADDRINUSE};
        select undef, undef, undef, 0.2;
    }
    $l or die "listen for $name: $!\n";
    print "$name ", $l->sockport, "\n";
    $svc{fileno $l} = [$name, $l];
    $sel->add($l);
}
binmode STDIN;
binmode STDOUT;
STDOUT->autoflush(1);
$sel->add(\*STDIN);
my ($next, $in, %id_of) = (1, '');

sub frame {
    my ($type, $id, $data) = @_;
    $data = '' unless defined $data;
    my $buf = pack('aNN', $type, $id, length $data) . $data;
    my $off = 0;
    while ($off < length $buf) {
        my $w = syswrite(STDOUT, $buf, length($buf) - $off, $off);
        exit 0 unless defined $w;    # the host went away
        $off += $w;
    }
}

sub drop {
    my ($id) = @_;
    my $c = delete $conn{$id} or return;
    delete $id_of{fileno $c};
    delete $rdone{$id};
    delete $wdone{$id};
    $sel->remove($c);
    close $c;
}

sub maybe_done {
    my ($id) = @_;
    drop($id) if $rdone{$id} && $wdone{$id};
}

sub from_host {
    while (length($in) >= 9) {
        my ($type, $id, $len) = unpack('aNN', $in);
        last if length($in) < 9 + $len;
        my $data = substr($in, 9, $len);
        substr($in, 0, 9 + $len) = '';
        my $c = $conn{$id} or next;
        if ($type eq 'D') {
            my $off = 0;
            while ($off < $len) {
                my $w = syswrite($c, $data, $len - $off, $off);
                if (!defined $w) { frame('R', $id); drop($id); last }
                $off += $w;
            }
        } elsif ($type eq 'C') {
            shutdown($c, 1);
            $wdone{$id} = 1;
            maybe_done($id);
        } else {
            drop($id);
        }
    }
}

while (1) {
    for my $h ($sel->can_read) {
        if ($h == \*STDIN) {
            my $n = sysread(STDIN, my $buf, 65536);
            exit 0 unless $n;    # the host closed the tunnel
            $in .= $buf;
            from_host();
        } elsif (my $s = $svc{fileno $h}) {
            my $c = $h->accept or next;
            # Without it Nagle holds a stream's last small write until the
            # client's delayed ACK: 40 ms at the end of every answer.
            setsockopt($c, IPPROTO_TCP, TCP_NODELAY, 1);
            my $id = $next++;
            $conn{$id} = $c;
            $id_of{fileno $c} = $id;
            $sel->add($c);
            frame('O', $id, $s->[0]);
        } else {
            my $id = $id_of{fileno $h};
            next unless defined $id;
            my $n = sysread($h, my $buf, 65536);
            if ($n) {
                frame('D', $id, $buf);
            } elsif (defined $n) {
                frame('C', $id);
                $sel->remove($h);
                $rdone{$id} = 1;
                maybe_done($id);
            } else {
                frame('R', $id);
                drop($id);
            }
        }
    }
}
