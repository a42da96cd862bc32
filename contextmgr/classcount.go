package contextmgr

import "encoding/binary"

// countClassesGeneric returns how many bytes of b are in classBound's low
// class (ASCII letters, space and control bytes) and in its high class
// (bytes >= 0x80), eight bytes at a time.
func countClassesGeneric(body []byte) (low, high int) {
	i := 0
	for i+8 <= len(body) {
		// Counts are kept per byte lane (a flag is 0 or 1 in each) and
		// summed every 255 words, before a lane can overflow: cheaper
		// than a population count per word, which Go checks the CPU for.
		var lows, highs uint64
		for end := min(len(body), i+255*8); i+8 <= end; i += 8 {
			x := binary.LittleEndian.Uint64(body[i:])
			h := x & swarHi
			if h != 0 {
				highs += h >> 7
				x &^= h // the sums below see the other bytes only
			}
			// Each lane stays below 0x100 in the sums: no carry between bytes.
			y := x | swarLo*0x20 // letters folded to lower case
			letter := (y + swarLo*(0x80-'a')) &^ (y + swarLo*(0x80-'z'-1))
			notCtrl := x + swarLo*(0x80-0x21) // high bit: the byte is above a space
			lows += ((letter | ^notCtrl) &^ h & swarHi) >> 7
		}
		low += sumLanes(lows)
		high += sumLanes(highs)
	}
	for _, c := range body[i:] {
		switch {
		case c >= 0x80:
			high++
		case c <= ' ', c|0x20 >= 'a' && c|0x20 <= 'z':
			low++
		}
	}
	return low, high
}
