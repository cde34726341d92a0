/// The binary min-heap the merges of sorted sequences share (the reader's walks over sorted
/// memtables, the import's runs): the element `less` puts first is at index 0.
///
/// Stateless; the caller owns the array, on its own thread.
enum MergeHeap {
    /// Puts `heap` in heap order.
    static func build<Element>(_ heap: inout [Element], by less: (Element, Element) -> Bool) {
        for i in stride(from: heap.count / 2 - 1, through: 0, by: -1) { siftDown(&heap, from: i, by: less) }
    }

    /// Restores heap order below `start` once the element there has grown (the first element
    /// moved on, or the last took its place).
    static func siftDown<Element>(_ heap: inout [Element], from start: Int = 0, by less: (Element, Element) -> Bool) {
        var i = start
        while true {
            let left = 2 * i + 1
            guard left < heap.count else { return }
            var smallest = left
            if left + 1 < heap.count && less(heap[left + 1], heap[left]) { smallest = left + 1 }
            guard less(heap[smallest], heap[i]) else { return }
            heap.swapAt(i, smallest)
            i = smallest
        }
    }
}
