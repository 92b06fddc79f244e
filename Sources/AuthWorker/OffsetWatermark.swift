import Kafka

/// Per partition, the offsets read but not finished, so that the offset stored for a partition
/// never passes a message whose outcome is not yet durable, while later messages of the same
/// partition (other keys) finish first.
///
/// Confined to the consume loop.
struct OffsetWatermark {
    private struct Partition {
        /// Offsets in the order they were read (increasing), with whether each is finished.
        var offsets: [(offset: Int64, finished: Bool)] = []
        /// Index of the first entry still in `offsets` (entries before it were dropped).
        var start = 0
        /// The assignment this state belongs to (`KafkaMessage.assignment`): a partition revoked
        /// and assigned again starts over.
        var epoch: Int
        /// The next offset to consume, as last stored.
        var stored: Int64?

        init(epoch: Int) { self.epoch = epoch }

        /// Drops the finished prefix; returns the offset after it when that is not stored yet.
        mutating func advance() -> Int64? {
            var next: Int64?
            while start < offsets.count, offsets[start].finished {
                next = offsets[start].offset + 1
                start += 1
            }
            if start > 1024 {
                offsets.removeFirst(start)
                start = 0
            }
            guard let next, next != stored else { return nil }
            stored = next
            return next
        }

        /// Offsets are increasing: found by binary search.
        mutating func finish(_ offset: Int64) {
            var low = start
            var high = offsets.count - 1
            while low <= high {
                let middle = (low + high) / 2
                if offsets[middle].offset == offset {
                    offsets[middle].finished = true
                    return
                } else if offsets[middle].offset < offset {
                    low = middle + 1
                } else {
                    high = middle - 1
                }
            }
        }

        var unfinished: Int { offsets.count - start - offsets[start...].filter(\.finished).count }
    }

    private var partitions: [TopicPartition: Partition] = [:]

    /// Records a message as read; returns the epoch to finish it with: the assignment it was
    /// read under. The first message of a later assignment starts the partition over; a message of
    /// an assignment already over is not tracked (its finish stores nothing).
    mutating func read(_ message: KafkaMessage) -> Int {
        let key = message.topicPartition
        let epoch = partitions[key]?.epoch ?? message.assignment
        if message.assignment > epoch {
            partitions[key] = Partition(epoch: message.assignment)
        } else if message.assignment < epoch {
            return message.assignment
        }
        // Appended in place: a copy taken out of the dictionary would copy every offset held.
        partitions[key, default: Partition(epoch: message.assignment)].offsets.append((message.offset, false))
        return message.assignment
    }

    /// Marks a message finished.
    mutating func finish(_ partition: TopicPartition, offset: Int64, epoch: Int) {
        guard partitions[partition]?.epoch == epoch else { return }
        // Marked in place: a copy taken out of the dictionary would copy every offset held.
        partitions[partition]?.finish(offset)
    }

    /// The positions to store now: per partition whose finished prefix grew, the offset after it.
    mutating func advance() -> [TopicPartition: Int64] {
        var positions: [TopicPartition: Int64] = [:]
        for key in Array(partitions.keys) {
            if let next = partitions[key]?.advance() { positions[key] = next }
        }
        return positions
    }

    /// Forgets a partition's assignments up to `assignment`, the one its revocation ended:
    /// messages read under them finishing later store nothing. Messages of a later assignment
    /// (the partition assigned again, and read, before the revocation was taken) are kept.
    mutating func revoke(_ partition: TopicPartition, assignment: Int) {
        guard (partitions[partition]?.epoch ?? 0) < assignment else { return }
        partitions[partition] = Partition(epoch: assignment)
    }

    /// Messages read and not finished, in every partition.
    var unfinished: Int { partitions.values.reduce(0) { $0 + $1.unfinished } }
}
