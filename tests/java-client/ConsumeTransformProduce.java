// The Java client's consume-transform-produce loop (tests/test_server_java_eos.py): a consumer of
// GROUP on the given group.protocol (consumer: KIP-848, or classic) reads IN read_committed, and a
// transactional producer writes "out-<value>" to OUT for each record and commits the consumer's
// offsets in the same transaction with sendOffsetsToTransaction(offsets, consumer.groupMetadata()):
// a TxnOffsetCommit naming the member id and its member epoch (or generation). Writes COUNT input
// records first. Prints "DONE <records>" once every input record went through a committed
// transaction.
//
// Usage: ConsumeTransformProduce BOOTSTRAP IN OUT GROUP consumer|classic COUNT

import java.time.Duration;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public class ConsumeTransformProduce {
    static Properties producerConfig(String bootstrap) {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "30000");
        return p;
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], in = args[1], out = args[2], group = args[3], protocol = args[4];
        int count = Integer.parseInt(args[5]);
        try (KafkaProducer<String, String> plain = new KafkaProducer<>(producerConfig(bootstrap))) {
            for (int i = 0; i < count; i++) {
                plain.send(new ProducerRecord<>(in, Integer.toString(i), Integer.toString(i)));
            }
            plain.flush();
        }

        Properties c = new Properties();
        c.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        c.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        c.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, protocol);
        c.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        c.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        c.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        c.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "50");
        c.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        c.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        Properties p = producerConfig(bootstrap);
        p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, "ctp-" + group);
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(c);
             KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
            producer.initTransactions();
            consumer.subscribe(List.of(in));
            int done = 0;
            long deadline = System.currentTimeMillis() + 90_000;
            while (done < count) {
                if (System.currentTimeMillis() > deadline) {
                    throw new IllegalStateException("timed out with " + done + " of " + count + " records committed");
                }
                ConsumerRecords<String, String> records = consumer.poll(Duration.ofMillis(500));
                if (records.isEmpty()) {
                    continue;
                }
                producer.beginTransaction();
                Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
                for (ConsumerRecord<String, String> r : records) {
                    producer.send(new ProducerRecord<>(out, r.key(), "out-" + r.value()));
                    offsets.put(new TopicPartition(r.topic(), r.partition()), new OffsetAndMetadata(r.offset() + 1));
                }
                producer.sendOffsetsToTransaction(offsets, consumer.groupMetadata());
                producer.commitTransaction();
                done += records.count();
            }
            System.out.println("DONE " + done);
        }
    }
}
