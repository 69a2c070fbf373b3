from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar, cast

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

if TYPE_CHECKING:
    from ..models.big_query_dataset import BigQueryDataset
    from ..models.big_query_table_input import BigQueryTableInput
    from ..models.compute_instance import ComputeInstance
    from ..models.log_bucket import LogBucket
    from ..models.log_entry import LogEntry
    from ..models.log_sink import LogSink
    from ..models.storage_bucket import StorageBucket
    from ..models.storage_object import StorageObject


T = TypeVar("T", bound="GoogleCloudDataInput")


@_attrs_define
class GoogleCloudDataInput:
    """Google Cloud resources to load into a sandbox's google_cloud server.

    Attributes:
        datasets (list[BigQueryDataset] | None | Unset): BigQuery datasets.
        tables (list[BigQueryTableInput] | None | Unset): BigQuery tables.
        buckets (list[StorageBucket] | None | Unset): Cloud Storage buckets.
        objects (list[StorageObject] | None | Unset): Cloud Storage objects.
        log_entries (list[LogEntry] | None | Unset): Cloud Logging entries.
        log_sinks (list[LogSink] | None | Unset): Cloud Logging sinks.
        log_buckets (list[LogBucket] | None | Unset): Cloud Logging buckets.
        instances (list[ComputeInstance] | None | Unset): Compute Engine instances.
    """

    datasets: list[BigQueryDataset] | None | Unset = UNSET
    tables: list[BigQueryTableInput] | None | Unset = UNSET
    buckets: list[StorageBucket] | None | Unset = UNSET
    objects: list[StorageObject] | None | Unset = UNSET
    log_entries: list[LogEntry] | None | Unset = UNSET
    log_sinks: list[LogSink] | None | Unset = UNSET
    log_buckets: list[LogBucket] | None | Unset = UNSET
    instances: list[ComputeInstance] | None | Unset = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)

    def to_dict(self) -> dict[str, Any]:
        datasets: list[dict[str, Any]] | None | Unset
        if isinstance(self.datasets, Unset):
            datasets = UNSET
        elif isinstance(self.datasets, list):
            datasets = []
            for datasets_type_0_item_data in self.datasets:
                datasets_type_0_item = datasets_type_0_item_data.to_dict()
                datasets.append(datasets_type_0_item)

        else:
            datasets = self.datasets

        tables: list[dict[str, Any]] | None | Unset
        if isinstance(self.tables, Unset):
            tables = UNSET
        elif isinstance(self.tables, list):
            tables = []
            for tables_type_0_item_data in self.tables:
                tables_type_0_item = tables_type_0_item_data.to_dict()
                tables.append(tables_type_0_item)

        else:
            tables = self.tables

        buckets: list[dict[str, Any]] | None | Unset
        if isinstance(self.buckets, Unset):
            buckets = UNSET
        elif isinstance(self.buckets, list):
            buckets = []
            for buckets_type_0_item_data in self.buckets:
                buckets_type_0_item = buckets_type_0_item_data.to_dict()
                buckets.append(buckets_type_0_item)

        else:
            buckets = self.buckets

        objects: list[dict[str, Any]] | None | Unset
        if isinstance(self.objects, Unset):
            objects = UNSET
        elif isinstance(self.objects, list):
            objects = []
            for objects_type_0_item_data in self.objects:
                objects_type_0_item = objects_type_0_item_data.to_dict()
                objects.append(objects_type_0_item)

        else:
            objects = self.objects

        log_entries: list[dict[str, Any]] | None | Unset
        if isinstance(self.log_entries, Unset):
            log_entries = UNSET
        elif isinstance(self.log_entries, list):
            log_entries = []
            for log_entries_type_0_item_data in self.log_entries:
                log_entries_type_0_item = log_entries_type_0_item_data.to_dict()
                log_entries.append(log_entries_type_0_item)

        else:
            log_entries = self.log_entries

        log_sinks: list[dict[str, Any]] | None | Unset
        if isinstance(self.log_sinks, Unset):
            log_sinks = UNSET
        elif isinstance(self.log_sinks, list):
            log_sinks = []
            for log_sinks_type_0_item_data in self.log_sinks:
                log_sinks_type_0_item = log_sinks_type_0_item_data.to_dict()
                log_sinks.append(log_sinks_type_0_item)

        else:
            log_sinks = self.log_sinks

        log_buckets: list[dict[str, Any]] | None | Unset
        if isinstance(self.log_buckets, Unset):
            log_buckets = UNSET
        elif isinstance(self.log_buckets, list):
            log_buckets = []
            for log_buckets_type_0_item_data in self.log_buckets:
                log_buckets_type_0_item = log_buckets_type_0_item_data.to_dict()
                log_buckets.append(log_buckets_type_0_item)

        else:
            log_buckets = self.log_buckets

        instances: list[dict[str, Any]] | None | Unset
        if isinstance(self.instances, Unset):
            instances = UNSET
        elif isinstance(self.instances, list):
            instances = []
            for instances_type_0_item_data in self.instances:
                instances_type_0_item = instances_type_0_item_data.to_dict()
                instances.append(instances_type_0_item)

        else:
            instances = self.instances

        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({})
        if datasets is not UNSET:
            field_dict["datasets"] = datasets
        if tables is not UNSET:
            field_dict["tables"] = tables
        if buckets is not UNSET:
            field_dict["buckets"] = buckets
        if objects is not UNSET:
            field_dict["objects"] = objects
        if log_entries is not UNSET:
            field_dict["log_entries"] = log_entries
        if log_sinks is not UNSET:
            field_dict["log_sinks"] = log_sinks
        if log_buckets is not UNSET:
            field_dict["log_buckets"] = log_buckets
        if instances is not UNSET:
            field_dict["instances"] = instances

        return field_dict

    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.big_query_dataset import BigQueryDataset  # noqa: PLC0415
        from ..models.big_query_table_input import BigQueryTableInput  # noqa: PLC0415
        from ..models.compute_instance import ComputeInstance  # noqa: PLC0415
        from ..models.log_bucket import LogBucket  # noqa: PLC0415
        from ..models.log_entry import LogEntry  # noqa: PLC0415
        from ..models.log_sink import LogSink  # noqa: PLC0415
        from ..models.storage_bucket import StorageBucket  # noqa: PLC0415
        from ..models.storage_object import StorageObject  # noqa: PLC0415

        d = dict(src_dict)

        def _parse_datasets(data: object) -> list[BigQueryDataset] | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, list):
                    raise TypeError()
                datasets_type_0 = []
                _datasets_type_0 = data
                for datasets_type_0_item_data in _datasets_type_0:
                    datasets_type_0_item = BigQueryDataset.from_dict(
                        datasets_type_0_item_data
                    )

                    datasets_type_0.append(datasets_type_0_item)

                return datasets_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(list[BigQueryDataset] | None | Unset, data)

        datasets = _parse_datasets(d.pop("datasets", UNSET))

        def _parse_tables(data: object) -> list[BigQueryTableInput] | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, list):
                    raise TypeError()
                tables_type_0 = []
                _tables_type_0 = data
                for tables_type_0_item_data in _tables_type_0:
                    tables_type_0_item = BigQueryTableInput.from_dict(
                        tables_type_0_item_data
                    )

                    tables_type_0.append(tables_type_0_item)

                return tables_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(list[BigQueryTableInput] | None | Unset, data)

        tables = _parse_tables(d.pop("tables", UNSET))

        def _parse_buckets(data: object) -> list[StorageBucket] | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, list):
                    raise TypeError()
                buckets_type_0 = []
                _buckets_type_0 = data
                for buckets_type_0_item_data in _buckets_type_0:
                    buckets_type_0_item = StorageBucket.from_dict(
                        buckets_type_0_item_data
                    )

                    buckets_type_0.append(buckets_type_0_item)

                return buckets_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(list[StorageBucket] | None | Unset, data)

        buckets = _parse_buckets(d.pop("buckets", UNSET))

        def _parse_objects(data: object) -> list[StorageObject] | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, list):
                    raise TypeError()
                objects_type_0 = []
                _objects_type_0 = data
                for objects_type_0_item_data in _objects_type_0:
                    objects_type_0_item = StorageObject.from_dict(
                        objects_type_0_item_data
                    )

                    objects_type_0.append(objects_type_0_item)

                return objects_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(list[StorageObject] | None | Unset, data)

        objects = _parse_objects(d.pop("objects", UNSET))

        def _parse_log_entries(data: object) -> list[LogEntry] | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, list):
                    raise TypeError()
                log_entries_type_0 = []
                _log_entries_type_0 = data
                for log_entries_type_0_item_data in _log_entries_type_0:
                    log_entries_type_0_item = LogEntry.from_dict(
                        log_entries_type_0_item_data
                    )

                    log_entries_type_0.append(log_entries_type_0_item)

                return log_entries_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(list[LogEntry] | None | Unset, data)

        log_entries = _parse_log_entries(d.pop("log_entries", UNSET))

        def _parse_log_sinks(data: object) -> list[LogSink] | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, list):
                    raise TypeError()
                log_sinks_type_0 = []
                _log_sinks_type_0 = data
                for log_sinks_type_0_item_data in _log_sinks_type_0:
                    log_sinks_type_0_item = LogSink.from_dict(
                        log_sinks_type_0_item_data
                    )

                    log_sinks_type_0.append(log_sinks_type_0_item)

                return log_sinks_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(list[LogSink] | None | Unset, data)

        log_sinks = _parse_log_sinks(d.pop("log_sinks", UNSET))

        def _parse_log_buckets(data: object) -> list[LogBucket] | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, list):
                    raise TypeError()
                log_buckets_type_0 = []
                _log_buckets_type_0 = data
                for log_buckets_type_0_item_data in _log_buckets_type_0:
                    log_buckets_type_0_item = LogBucket.from_dict(
                        log_buckets_type_0_item_data
                    )

                    log_buckets_type_0.append(log_buckets_type_0_item)

                return log_buckets_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(list[LogBucket] | None | Unset, data)

        log_buckets = _parse_log_buckets(d.pop("log_buckets", UNSET))

        def _parse_instances(data: object) -> list[ComputeInstance] | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            try:
                if not isinstance(data, list):
                    raise TypeError()
                instances_type_0 = []
                _instances_type_0 = data
                for instances_type_0_item_data in _instances_type_0:
                    instances_type_0_item = ComputeInstance.from_dict(
                        instances_type_0_item_data
                    )

                    instances_type_0.append(instances_type_0_item)

                return instances_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(list[ComputeInstance] | None | Unset, data)

        instances = _parse_instances(d.pop("instances", UNSET))

        google_cloud_data_input = cls(
            datasets=datasets,
            tables=tables,
            buckets=buckets,
            objects=objects,
            log_entries=log_entries,
            log_sinks=log_sinks,
            log_buckets=log_buckets,
            instances=instances,
        )

        google_cloud_data_input.additional_properties = d
        return google_cloud_data_input

    @property
    def additional_keys(self) -> list[str]:
        return list(self.additional_properties.keys())

    def __getitem__(self, key: str) -> Any:
        return self.additional_properties[key]

    def __setitem__(self, key: str, value: Any) -> None:
        self.additional_properties[key] = value

    def __delitem__(self, key: str) -> None:
        del self.additional_properties[key]

    def __contains__(self, key: str) -> bool:
        return key in self.additional_properties
