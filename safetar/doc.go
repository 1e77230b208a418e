// Package safetar extracts tar streams that come out of an untrusted
// container, and packs host trees for upload into one.
//
// Everything in a stream read from a container is treated as hostile: the
// agent inside controls every byte of Docker's GET /containers/{id}/archive
// response. [Extract] writes only regular files and directories, only under
// the destination directory, and only within limits. It never creates
// symlinks, hardlinks, devices or other special files.
//
// # Extraction policy
//
// Destination. Extract writes into dir, which must be an existing, empty
// directory (a fresh staging directory). Every filesystem operation goes
// through an [os.Root] opened on dir, so even a name that slipped past the
// checks below cannot resolve outside it. On any error the caller should
// remove dir: a partial tree may remain. Publishing the staged tree (rename
// or no-follow copy) is the caller's job.
//
// Names. The stream's names are those archive/tar returns, after PAX path
// records and GNU long-name records are applied. An entry is rejected with an
// [*Error] wrapping [ErrUnsafe] when its name:
//   - is empty, ".", or "./";
//   - is absolute (leading "/");
//   - has a ".." component, an empty component ("a//b"), or a "." component
//     after any leading "./" prefixes (which are removed);
//   - contains a NUL byte or a backslash (backslashes are traversal on
//     Windows hosts and never produced by Docker for Linux containers);
//   - is longer than 4096 bytes, or has a component longer than 255 bytes;
//   - is not filepath.IsLocal on the host OS (on Windows this also refuses
//     drive letters and reserved names such as NUL and COM1);
//   - does not start with the requested top-level name at a path-component
//     boundary: with top "dir", "dir" and "dir/x" pass, "dir2/x" does not
//     (moby#52948);
//   - ends in "/" but is not a directory.
//
// Duplicates. Every name may appear once. A second entry whose name equals,
// or case-folds to, an earlier entry's name is rejected with [ErrUnsafe],
// whatever the two types (file twice, directory then file, file then
// directory, symlink then file of the same name ...). The single exception:
// a directory entry for a directory that was created implicitly as the parent
// of an earlier entry. Case folding uses Unicode simple folding (the
// equivalence of strings.EqualFold on valid UTF-8; invalid bytes are compared
// as they are). Unicode normalisation (NFC vs NFD twins)
// is not compared, since that needs golang.org/x/text; on Linux such twins
// are distinct files, and on a normalisation-insensitive filesystem (APFS)
// the second create fails because files are created with O_EXCL, so the
// archive is still rejected (with the underlying *os.PathError).
//
// Parents. An entry's parent directories must be directories created by this
// run. A missing parent is created implicitly as a 0755 directory; a parent
// that names a file or a skipped entry (for example a skipped symlink "link"
// followed by "link/x") is rejected with [ErrUnsafe]. Nothing on disk is ever
// a symlink, so nothing is written through one.
//
// Types.
//   - Regular files are created with O_CREATE|O_EXCL|O_NOFOLLOW. Their mode
//     is 0755 if the owner-execute bit is set in the header, else 0644.
//   - Directories are created 0755, whatever the header says (a mode 0000
//     directory stays writable).
//   - Hardlinks whose target is a regular file already extracted by this run
//     (same exact name, under top) are materialised as a copy: a new file
//     with its own inode and the target's mode. The copy counts toward
//     MaxBytes. Any other hardlink (target absent, later in the stream,
//     outside top, unsafe, a directory, a skipped entry) is skipped and
//     reported.
//   - Symlinks, character and block devices, FIFOs, GNU and PAX sparse files,
//     contiguous files (type '7') and unknown typeflags are skipped and listed
//     in [Report.Skipped]. Their bodies are read and discarded.
//   - PAX global headers are consumed silently (they count toward MaxEntries).
//
// Metadata. Uid, gid, user and group names, xattrs (SCHILY.xattr.*), and
// setuid, setgid and sticky bits are ignored. A regular file's mtime is set
// from the header when it lies between the Unix epoch and 24 hours past the
// host's current time; otherwise (and for directories) the extraction time
// is left.
//
// Limits. [Limits] bounds MaxBytes (total bytes of regular files written,
// including hardlink copies), MaxEntries (archive entries of any kind plus
// directories created implicitly) and MaxDepth (path components, top
// included). A zero field selects the default (1 GiB, 100000, 64); a negative
// one is treated as zero. A regular file whose header Size exceeds the
// remaining byte budget is rejected before its body is read, and copied bytes
// are counted as well. The raw stream is also capped at MaxBytes plus 16 KiB
// per allowed entry, which bounds data discarded with skipped entries and
// chains of PAX or GNU metadata records. Going over any limit returns an
// [*Error] wrapping [ErrLimit].
//
// Stream integrity. A stream that ends early (mid-header, mid-body, or
// cleanly between entries without the end-of-archive blocks), or that holds
// a corrupt header, returns an [*Error] wrapping [ErrTruncated]. So does an
// archive with no entries. Bytes after the end-of-archive blocks are not
// read.
//
// Cancellation. Extract checks ctx between entries and on every read from
// r. Calls to r.Read run one at a time on a helper goroutine, so even an r
// whose Read blocks indefinitely cannot hold Extract past ctx's deadline; the
// returned error then wraps ctx.Err(). In that one case a Read may still be
// in progress after Extract returns: the helper stays blocked in it until it
// returns (close r to make it return), discards its data and exits.
// Otherwise r is never read after Extract returns.
//
// Errors. Rejections are [*Error] values naming the entry (shortened to 512
// bytes) and the reason, and wrapping one of the sentinels; a read error from
// r is wrapped together with [ErrTruncated]. Filesystem failures (disk full,
// permission denied) are [*Error] values wrapping the *os.PathError. Invalid
// arguments (a top that is not a single path component, a missing or
// non-empty dir) are plain errors returned before r is read.
//
// # Packing
//
// [Pack] writes an uncompressed tar of a host file or directory tree, walked
// with Lstat: host symlinks are stored as symlinks and never followed.
// Sockets, devices and FIFOs are left out. Ownership is recorded as 0:0 with
// no user or group names (the daemon applies its own ownership on upload),
// permission bits are kept without setuid, setgid and sticky bits, and mtimes
// are kept to the second. A file that changes size while it is being packed
// is an error.
package safetar
