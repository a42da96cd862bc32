// Package wiretest holds what the codecs' tests share: a new reader
// compared with the reader it replaced, kept as its reference.
//
// It is imported by tests only; it must not be imported by the gateway's
// code (it imports testing).
package wiretest
