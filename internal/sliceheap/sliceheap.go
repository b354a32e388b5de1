// Package sliceheap is a container/heap over a slice, ordered by a
// function: the one min-heap the ledger's shard merge and finalize's sort
// runs use.
package sliceheap

// Heap is a container/heap of T, least first by Order: use it with
// container/heap's Init, Push, Pop and Fix. The zero value needs Order set.
type Heap[T any] struct {
	S     []T
	Order func(a, b T) bool
}

// Len is the number of elements.
func (h *Heap[T]) Len() int { return len(h.S) }

// Less reports whether element i orders before element j.
func (h *Heap[T]) Less(i, j int) bool { return h.Order(h.S[i], h.S[j]) }

// Swap swaps elements i and j.
func (h *Heap[T]) Swap(i, j int) { h.S[i], h.S[j] = h.S[j], h.S[i] }

// Push appends x (heap.Interface's Push; call heap.Push instead).
func (h *Heap[T]) Push(x any) { h.S = append(h.S, x.(T)) }

// Pop removes the last element (heap.Interface's Pop; call heap.Pop instead).
func (h *Heap[T]) Pop() any {
	n := len(h.S) - 1
	x := h.S[n]
	h.S = h.S[:n]
	return x
}
