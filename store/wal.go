package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"unsafe"
)

// The write-ahead log in front of the bbolt file. A group commit is one
// record appended to the active segment with one write(2): once it returns,
// the commit survives a crash or a restart of the process (the kernel holds
// it). The log is fsynced by the sync policy; the bbolt file catches up at
// checkpoints, after which the segments it absorbed are deleted.
//
// A record:   u32 payload length | u32 CRC-32C of the payload | payload
// A payload:  ops, each  u8 bucket index | uvarint key length | key |
//                        uvarint (value length + 1, 0 for a delete) | value
//
// A record whose length, ops or checksum do not hold is never applied,
// nor anything after it. At the end of the newest segment it is a write a
// crash tore (a torn tail), which opening the store cuts off with a
// warning; anywhere else it is damage, and the store does not open over
// it (checkLog, and doc.go for the rule).

const (
	walHeader = 8
	// maxRecord bounds one commit's record (the length field is 32 bits).
	maxRecord = 1 << 30
	segPrefix = "wal-"
	segSuffix = ".log"
)

var (
	castagnoli = crc32.MakeTable(crc32.Castagnoli)
	errTorn    = errors.New("store: corrupt log record")
)

// bucketIndex numbers the buckets in the log; the order of AllBuckets is
// part of the file format.
func bucketIndex(b Bucket) (byte, bool) {
	i := slices.Index(AllBuckets, b)
	return byte(i), i >= 0
}

// appendRecord encodes the batches as one record after dst.
func appendRecord(dst []byte, batches [][]Op) ([]byte, error) {
	start := len(dst)
	dst = append(dst, make([]byte, walHeader)...)
	for _, ops := range batches {
		for _, op := range ops {
			bi, ok := bucketIndex(op.Bucket)
			if !ok {
				return dst[:start], fmt.Errorf("store: no bucket %q", op.Bucket)
			}
			dst = append(dst, bi)
			dst = binary.AppendUvarint(dst, uint64(len(op.Key)))
			dst = append(dst, op.Key...)
			if op.Value == nil {
				dst = append(dst, 0)
				continue
			}
			dst = binary.AppendUvarint(dst, uint64(len(op.Value))+1)
			dst = append(dst, op.Value...)
		}
	}
	payload := dst[start+walHeader:]
	if len(payload) > maxRecord {
		return dst[:start], fmt.Errorf("store: a commit of %d bytes exceeds the log's record bound", len(payload))
	}
	binary.LittleEndian.PutUint32(dst[start:], uint32(len(payload)))
	binary.LittleEndian.PutUint32(dst[start+4:], crc32.Checksum(payload, castagnoli))
	return dst, nil
}

// decodeOps calls fn for every op of a payload. Keys and values alias the
// payload.
func decodeOps(payload []byte, fn func(Op) error) error {
	for len(payload) > 0 {
		bi := int(payload[0])
		if bi >= len(AllBuckets) {
			return errTorn
		}
		payload = payload[1:]
		kl, n := binary.Uvarint(payload)
		if n <= 0 || kl > uint64(len(payload)-n) {
			return errTorn
		}
		key := payload[n : n+int(kl)]
		payload = payload[n+int(kl):]
		vl, n := binary.Uvarint(payload)
		if n <= 0 || (vl > 0 && vl-1 > uint64(len(payload)-n)) {
			return errTorn
		}
		op := Op{Bucket: AllBuckets[bi], Key: key}
		payload = payload[n:]
		if vl > 0 {
			op.Value = payload[:vl-1]
			payload = payload[vl-1:]
		}
		if err := fn(op); err != nil {
			return err
		}
	}
	return nil
}

// readRecords calls fn with the payload of every whole record of a
// segment's bytes, in order, and stops at the first one that is not whole
// (what that means for the store: checkLog). It reports the bytes of whole
// records. Payloads alias data, which must outlive their use (bbolt keeps
// the slices it is given until its transaction ends).
func readRecords(data []byte, fn func(payload []byte) error) (int, error) {
	good := 0
	for {
		payload, ok := recordAt(data[good:], nil)
		if !ok {
			return good, nil
		}
		if err := fn(payload); err != nil {
			return good, err
		}
		good += walHeader + len(payload)
	}
}

// recordAt returns the payload of the record rest begins with, if it is
// whole: its length fits, its ops decode and its checksum holds. A record
// is never empty (a commit writes at least one op), so zeros (a file
// extended by a crash whose data never reached the disk) are not records.
// hashed, when not nil, counts the bytes checksummed (see nextWholeRecord).
func recordAt(rest []byte, hashed *int64) ([]byte, bool) {
	if len(rest) < walHeader {
		return nil, false
	}
	n := binary.LittleEndian.Uint32(rest[:4])
	if n == 0 || uint64(n) > uint64(len(rest)-walHeader) {
		return nil, false
	}
	payload := rest[walHeader : walHeader+int(n)]
	// The ops first: they are walked by their lengths, which is cheaper
	// than the checksum for bytes that are not a record.
	if decodeOps(payload, func(Op) error { return nil }) != nil {
		return nil, false
	}
	if hashed != nil {
		*hashed += int64(n)
	}
	if crc32.Checksum(payload, castagnoli) != binary.LittleEndian.Uint32(rest[4:8]) {
		return nil, false
	}
	return payload, true
}

// segment is one log file.
type segment struct {
	seq  uint64
	path string
	f    *os.File
	fd   uintptr // f's, for writeRaw
	size int64   // bytes of whole records
}

func segmentPath(dir string, seq uint64) string {
	return filepath.Join(dir, fmt.Sprintf("%s%016x%s", segPrefix, seq, segSuffix))
}

// listSegments returns the log segments of dir, oldest first.
func listSegments(dir string) ([]uint64, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var seqs []uint64
	for _, e := range entries {
		name := e.Name()
		if !strings.HasPrefix(name, segPrefix) || !strings.HasSuffix(name, segSuffix) {
			continue
		}
		seq, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimPrefix(name, segPrefix), segSuffix), 16, 64)
		if err != nil {
			continue
		}
		seqs = append(seqs, seq)
	}
	slices.Sort(seqs)
	return seqs, nil
}

// createSegment creates an empty segment and makes its name durable.
func createSegment(dir string, seq uint64) (*segment, error) {
	path := segmentPath(dir, seq)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syncDir(dir); err != nil {
		f.Close()
		return nil, err
	}
	return &segment{seq: seq, path: path, f: f, fd: f.Fd()}, nil
}

// syncDir makes the directory's entries durable (a new segment's name).
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// write appends a record; a failed or short write is cut off again, so the
// next record starts on a record boundary. raw: see writeRaw.
func (s *segment) write(rec []byte, raw bool) error {
	n := 0
	if raw {
		n = s.writeRaw(rec)
	}
	var err error
	if n < len(rec) {
		// The rest (all of it after a raw error), the ordinary way: it
		// retries an interrupted write and reports the error.
		var m int
		m, err = s.f.Write(rec[n:])
		n += m
	}
	if err == nil && n < len(rec) {
		err = io.ErrShortWrite
	}
	if err != nil {
		if terr := s.f.Truncate(s.size); terr != nil {
			return errors.Join(err, terr)
		}
		return err
	}
	s.size += int64(n)
	return nil
}

// writeRaw writes rec with one raw write(2) and returns how much of it was
// written (0 on an error, which the ordinary write then meets again).
//
// Why: an ordinary system call tells the Go scheduler it may block
// (entersyscall), and when the process was idle that wakes the runtime's
// monitor thread, sysmon, which then polls until the process looks idle
// again: at 1,000 calls/s a cost in the gateway's CPU that
// docs/performance.md measures (the raw socket system calls' entry). The
// call log's writes linger instead (telemetry.LogWriter). A raw call
// keeps the processor (the P) for its duration, which is a few
// microseconds for an append to the page cache, but would be the whole
// stall if the file system held the write: the caller (Bolt.commit) takes
// this path only while nothing in the store is fsyncing or checkpointing,
// the times a journal commit can hold a write, and not for a while after
// a raw write was slow.
func (s *segment) writeRaw(rec []byte) int {
	if len(rec) == 0 {
		return 0
	}
	n, _, errno := syscall.RawSyscall(syscall.SYS_WRITE, s.fd, uintptr(unsafe.Pointer(&rec[0])), uintptr(len(rec)))
	if errno != 0 {
		return 0
	}
	return int(n)
}
